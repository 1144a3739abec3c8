#!/usr/bin/env bash
# e2e: `megatron plan` on the shipped machine files and one measured here:
#  - GPT-3 175B on 1024 A100s at TP 8 x PP 16: the text report and the JSON agree, memory
#    adds up, the step is the sum of its parts; an uneven split sets the pace, planned alike
#    from the split flags and from the --pipeline-model-parallel-layout string that equals them;
#  - --search over 1024 devices lists fitting layouts fastest first;
#  - megatron-cpp's BERT in pipeline stages, planned and searched, pre- and post-LN;
#  - `bench --mode machine` (tiny sizes) writes a machine file that `plan` reads;
#  - bad input: each error names the problem and exits non-zero.
set -euo pipefail
BIN="${MEGATRON_BINARY:?}"
SRC="${MEGATRON_SOURCE_DIR:?}"
A100="$SRC/examples/machines/dgx_a100_80gb.json"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

GPT3=(--num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048
      --vocab-size 50257 --global-batch-size 1536 --bf16)
LAYOUT=(--tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 --world-size 1024
        --micro-batch-size 1 --sequence-parallel --recompute-granularity selective
        --use-distributed-optimizer --implementation megatron-lm)

"$BIN" plan --machine "$A100" "${GPT3[@]}" "${LAYOUT[@]}" > "$WORK/plan.txt"
grep -q "174.6[0-9] B parameters" "$WORK/plan.txt"
grep -q "TP 8 x PP 16 x DP 8" "$WORK/plan.txt"
grep -q ": fits" "$WORK/plan.txt"
grep -q "TP all-gather (forward)" "$WORK/plan.txt"
grep -q "^throughput: .* tokens/s; .* TFLOP/s per device (model FLOPs, MFU" "$WORK/plan.txt"

"$BIN" plan --machine "$A100" "${GPT3[@]}" "${LAYOUT[@]}" --json > "$WORK/plan.json"
node -e '
  const p = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const close = (a, b, what) => { if (Math.abs(a - b) > 1e-6 * Math.abs(b))
    throw new Error(what + ": " + a + " != " + b); };
  if (p.layout.data_parallel_size !== 8 || p.layout.num_micro_batches !== 192)
    throw new Error("layout " + JSON.stringify(p.layout));
  const r = p.memory.first_stage;
  close(r.total_bytes, r.weights_bytes + r.gradients_bytes + r.optimizer_bytes +
        r.activations_bytes + r.workspace_bytes + r.step_buffers_bytes + r.reserved_bytes,
        "memory total");
  close(r.optimizer_bytes / r.parameters, 12 / 8, "distributed optimizer bytes");
  const t = p.time;
  close(t.step_seconds, t.pipeline_seconds + t.dp_comm_exposed_seconds +
        t.embedding_sync_seconds + t.sequence_parallel_sync_seconds + t.optimizer_seconds, "step");
  close(t.pipeline_seconds, 192 * t.per_micro_batch.stage_seconds + t.bubble_seconds, "pipeline");
  close(t.tokens_per_second, 1536 * 2048 / t.step_seconds, "tokens/s");
  if (!(t.mfu > 0.2 && t.mfu < 0.7)) throw new Error("MFU " + t.mfu);
  if (!p.memory.fits) throw new Error("does not fit");
' "$WORK/plan.json"

# Megatron's uneven split: the layout names it, and the most loaded stage sets the pace: 96
# layers over PP 16 as 2, then 6 on each of 14 stages, then 10 are slower than 6 on each.
"$BIN" plan --machine "$A100" "${GPT3[@]}" "${LAYOUT[@]}" --decoder-first-pipeline-num-layers 2 \
  --decoder-last-pipeline-num-layers 10 --json > "$WORK/uneven.json"
"$BIN" plan --machine "$A100" "${GPT3[@]}" "${LAYOUT[@]}" --decoder-first-pipeline-num-layers 2 \
  --decoder-last-pipeline-num-layers 10 | grep -q "first stage 2 layers, last stage 10 layers"
node -e '
  const [even, uneven] = process.argv.slice(1).map(f => JSON.parse(require("fs").readFileSync(f)));
  if (!(uneven.time.per_micro_batch.stage_seconds > even.time.per_micro_batch.stage_seconds))
    throw new Error("the stage of 10 layers is not the slowest");
' "$WORK/plan.json" "$WORK/uneven.json"
# The same split as Megatron's layout string: the same memory and time, the stages named.
"$BIN" plan --machine "$A100" "${GPT3[@]}" "${LAYOUT[@]}" \
  --pipeline-model-parallel-layout "Et*2|(t*6|)*14t*10L" --json > "$WORK/layout.json"
"$BIN" plan --machine "$A100" "${GPT3[@]}" "${LAYOUT[@]}" \
  --pipeline-model-parallel-layout "Et*2|(t*6|)*14t*10L" | grep -q "stages of 2, 6, 6, "
node -e '
  const [uneven, layout] = process.argv.slice(1).map(f => JSON.parse(require("fs").readFileSync(f)));
  for (const key of ["memory", "time"])
    if (JSON.stringify(uneven[key]) !== JSON.stringify(layout[key]))
      throw new Error("the layout plans another " + key + " than the split flags it equals");
' "$WORK/uneven.json" "$WORK/layout.json"

# Search: fastest first, all fit, all use 1024 devices.
"$BIN" plan --machine "$A100" "${GPT3[@]}" --implementation megatron-lm --world-size 1024 \
  --search --search-top 5 --json > "$WORK/search.json"
node -e '
  const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  if (s.best.length !== 5 || !(s.fitting > 5)) throw new Error("search size");
  s.best.forEach((c, i) => {
    if (c.layout.world_size !== 1024) throw new Error("world size");
    if (c.peak_bytes > 80 * 2 ** 30) throw new Error("does not fit");
    if (i && c.time.tokens_per_second > s.best[i - 1].time.tokens_per_second)
      throw new Error("not sorted");
  });
' "$WORK/search.json"
"$BIN" plan --machine "$A100" "${GPT3[@]}" --implementation megatron-lm --world-size 1024 \
  --search --search-top 3 | grep -q "^   1 "

# A machine measured here (tiny sizes, seconds) plans a small GPT on this implementation.
OMP_NUM_THREADS=1 "$BIN" bench --mode machine --device cpu --output "$WORK/cpu.json" --tokens 128 \
  --hidden-size 128 --seq-length 64 --min-time 0.01 --dtype f32 2> /dev/null
"$BIN" plan --machine "$WORK/cpu.json" --num-layers 2 --hidden-size 128 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 1000 --micro-batch-size 2 \
  > "$WORK/cpu_plan.txt"
grep -q "implementation megatron-cpp" "$WORK/cpu_plan.txt"
grep -q "optimizer state (8 B/param)" "$WORK/cpu_plan.txt"
grep -q "memory per device (MiB)" "$WORK/cpu_plan.txt"
# ... and the same with a pipeline, the distributed optimizer and the Llama options, on a
# machine of several devices (the one measured above is 1 process, so 1 device per node).
"$BIN" plan --machine "$A100" --num-layers 2 --hidden-size 128 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 1000 --micro-batch-size 2 \
  --global-batch-size 8 --world-size 4 --pipeline-model-parallel-size 2 \
  --use-distributed-optimizer --swiglu --group-query-attention --num-query-groups 2 \
  --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
  --untie-embeddings-and-output-weights > "$WORK/cpu_pp_plan.txt"
grep -q "TP 1 x PP 2 x DP 2" "$WORK/cpu_pp_plan.txt"
# The distributed optimizer at DP 2: the fp32 Adam moments halved (8 / 2 B per parameter).
grep -q "optimizer state (4 B/param)" "$WORK/cpu_pp_plan.txt"
grep -q "optimizer step (transient)" "$WORK/cpu_pp_plan.txt"
# ... and with sequence parallelism and selective recompute: the pipeline sends shards, the
# TP all-reduces become all-gathers and reduce-scatters.
"$BIN" plan --machine "$A100" --num-layers 2 --hidden-size 128 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 1000 --micro-batch-size 2 \
  --global-batch-size 8 --world-size 8 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --sequence-parallel --recompute-granularity selective \
  > "$WORK/cpu_sp_plan.txt"
grep -q "recompute selective, sequence-parallel" "$WORK/cpu_sp_plan.txt"
grep -q "TP reduce-scatter (forward)" "$WORK/cpu_sp_plan.txt"
# BERT in pipeline stages on megatron-cpp: the last stage's tied copy is all-reduced with the
# first stage's word embedding, and --search tries pipelined BERT layouts.
"$BIN" plan --machine "$A100" --model bert --num-layers 4 --hidden-size 128 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 1000 --micro-batch-size 2 \
  --global-batch-size 8 --world-size 4 --pipeline-model-parallel-size 2 \
  > "$WORK/bert_pp_plan.txt"
grep -q "TP 1 x PP 2 x DP 2" "$WORK/bert_pp_plan.txt"
grep -q "tied embedding all-reduce" "$WORK/bert_pp_plan.txt"
# With sequence parallelism its last stage all-gathers the hidden states before the heads and
# reduce-scatters nothing after them; --search tries BERT SP layouts too.
"$BIN" plan --machine "$A100" --model bert --num-layers 4 --hidden-size 128 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 1000 --micro-batch-size 2 \
  --global-batch-size 8 --world-size 4 --tensor-model-parallel-size 2 \
  --pipeline-model-parallel-size 2 --sequence-parallel > "$WORK/bert_sp_plan.txt"
grep -q "recompute none, sequence-parallel" "$WORK/bert_sp_plan.txt"
grep -q "TP all-gather (output layer input)" "$WORK/bert_sp_plan.txt"
if grep -q "TP reduce-scatter (output layer gradient)" "$WORK/bert_sp_plan.txt"; then
  echo "megatron-cpp's BERT planned with a reduce-scatter after its heads" >&2
  exit 1
fi
"$BIN" plan --machine "$A100" --model bert --num-layers 4 --hidden-size 128 \
  --num-attention-heads 4 --seq-length 64 --vocab-size 1000 --global-batch-size 8 \
  --world-size 4 --search --search-top 1000 --json > "$WORK/bert_search.json"
node -e '
  const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  if (!s.best.some((c) => c.layout.pipeline_model_parallel_size > 1))
    throw new Error("no pipelined BERT layout");
  if (!s.best.some((c) => c.layout.sequence_parallel))
    throw new Error("no sequence-parallel BERT layout");
' "$WORK/bert_search.json"
# A post-LN BERT (pretrain-bert's --post-layernorm: an embedding LayerNorm, no final one): the
# same parameters, with PP 2 the norm's 2h = 256 on the first stage instead of the last.
BERT_PP=(--model bert --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 64
         --vocab-size 1000 --micro-batch-size 2 --global-batch-size 8 --world-size 4
         --pipeline-model-parallel-size 2)
"$BIN" plan --machine "$A100" "${BERT_PP[@]}" --json > "$WORK/bert_pre.json"
"$BIN" plan --machine "$A100" "${BERT_PP[@]}" --post-layernorm --json > "$WORK/bert_post.json"
node -e '
  const read = (f) => JSON.parse(require("fs").readFileSync(f, "utf8"));
  const pre = read(process.argv[1]), post = read(process.argv[2]);
  if (pre.model.layernorm_order !== "pre-LN" || post.model.layernorm_order !== "post-LN")
    throw new Error("orders " + pre.model.layernorm_order + ", " + post.model.layernorm_order);
  if (post.model.parameters !== pre.model.parameters) throw new Error("parameters differ");
  const first = post.memory.first_stage.parameters - pre.memory.first_stage.parameters;
  const last = pre.memory.last_stage.parameters - post.memory.last_stage.parameters;
  if (first !== 256 || last !== 256) throw new Error("moved " + first + ", " + last);
' "$WORK/bert_pre.json" "$WORK/bert_post.json"
"$BIN" plan --machine "$A100" "${BERT_PP[@]}" --post-layernorm | grep -q ", post-LN$"
# pretrain-bert's --bert-no-binary-head: no pooler (h·h + h) and no sentence-order head (2h + 2),
# both on the last stage.
"$BIN" plan --machine "$A100" "${BERT_PP[@]}" --bert-no-binary-head --json > "$WORK/bert_nohead.json"
node -e '
  const [pre, nohead] = process.argv.slice(1).map(f => JSON.parse(require("fs").readFileSync(f)));
  const h = pre.model.hidden_size;
  const dropped = pre.memory.last_stage.parameters - nohead.memory.last_stage.parameters;
  if (dropped !== h * h + h + 2 * h + 2) throw new Error("last stage dropped " + dropped);
  if (pre.memory.first_stage.parameters !== nohead.memory.first_stage.parameters)
    throw new Error("first stage changed");
' "$WORK/bert_pre.json" "$WORK/bert_nohead.json"

# Context parallelism: a CP rank's plan, each exchange listed; the search tries CP sizes.
LONG=(--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --group-query-attention
      --num-query-groups 4 --seq-length 65536 --vocab-size 32000 --micro-batch-size 1 --bf16
      --global-batch-size 2)
"$BIN" plan --machine "$A100" "${LONG[@]}" --world-size 8 --context-parallel-size 4 \
  > "$WORK/cp_plan.txt"
grep -q "TP 1 x CP 4 (p2p) x PP 1 x DP 2" "$WORK/cp_plan.txt"
grep -q "context-parallel attention" "$WORK/cp_plan.txt"
grep -q "CP ring K/V (forward)" "$WORK/cp_plan.txt"
"$BIN" plan --machine "$A100" "${LONG[@]}" --world-size 8 --context-parallel-size 4 \
  --cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 2 | grep -q "CP all-to-all QKV"
"$BIN" plan --machine "$A100" "${LONG[@]}" --world-size 8 --search --search-top 1000 --json \
  > "$WORK/cp_search.json"
node -e '
  const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  if (!s.best.some((c) => c.layout.context_parallel_size > 1))
    throw new Error("no context-parallel layout in the search");
' "$WORK/cp_search.json"

# A mixture-of-experts model with expert parallelism: the expert grid in the layout, the experts'
# share of the memory, the token exchange in the time; the search enumerates EP.
MOE=(--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --vocab-size
     32000 --num-experts 16 --moe-ffn-hidden-size 1024 --moe-router-topk 2 --bf16
     --micro-batch-size 1 --global-batch-size 64 --implementation megatron-lm)
"$BIN" plan --machine "$A100" "${MOE[@]}" --world-size 16 --tensor-model-parallel-size 2 \
  --expert-model-parallel-size 4 --sequence-parallel --moe-token-dispatcher-type alltoall \
  --use-distributed-optimizer > "$WORK/moe_plan.txt"
grep -q "TP 2 x PP 1 x DP 8 (experts: EP 4 x ETP 2 x EDP 2)" "$WORK/moe_plan.txt"
grep -q "of which experts (EP 4 x ETP 2)" "$WORK/moe_plan.txt"
grep -q "optimizer state (1.5, experts 6 B/param)" "$WORK/moe_plan.txt"
grep -q "EP all-to-all dispatch + combine (forward)" "$WORK/moe_plan.txt"
grep -q "ETP all-gather + reduce-scatter (forward)" "$WORK/moe_plan.txt"
"$BIN" plan --machine "$A100" "${MOE[@]}" --world-size 16 --search --search-top 20 \
  > "$WORK/moe_search.txt"
grep -qE "^ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +(2|4|8|16) " "$WORK/moe_search.txt"
grep -q "MoE token exchange" "$WORK/moe_plan.txt"

# Bad input: message and non-zero exit.
expect_error() {  # expected-message command...
  local want="$1"
  shift
  if "$@" > "$WORK/out" 2> "$WORK/err"; then
    echo "expected failure: $*" >&2
    exit 1
  fi
  grep -qF -- "$want" "$WORK/err" || { echo "missing '$want' in:" >&2; cat "$WORK/err" >&2; exit 1; }
}
expect_error "--num-attention-heads 96 must be divisible by --tensor-model-parallel-size 5" \
  "$BIN" plan --machine "$A100" "${GPT3[@]}" --tensor-model-parallel-size 5 --world-size 1000 \
  --micro-batch-size 1 --implementation megatron-lm
expect_error "--num-layers 96 is not divisible by --pipeline-model-parallel-size 7" \
  "$BIN" plan --machine "$A100" "${GPT3[@]}" --pipeline-model-parallel-size 7 --world-size 56 \
  --tensor-model-parallel-size 8 --micro-batch-size 1 --implementation megatron-lm
expect_error "--world-size 100 must be divisible by --tensor-model-parallel-size x" \
  "$BIN" plan --machine "$A100" "${GPT3[@]}" --tensor-model-parallel-size 8 --world-size 100 \
  --micro-batch-size 1
expect_error "--seq-length 2048 must be divisible by 2 x CP = 6" \
  "$BIN" plan --machine "$A100" "${GPT3[@]}" --context-parallel-size 3 --world-size 3 \
  --micro-batch-size 1
expect_error "cannot read the machine file '$WORK/none.json'" \
  "$BIN" plan --machine "$WORK/none.json" "${GPT3[@]}" --micro-batch-size 1
echo '{"name": "x", "device": {"memory_gib": 8, "memory_bandwidth_gbps": 100, "compute": {"fp32": {"peak_tflops": 1, "gemm_efficiency": 0.5}}}, "node": {"devices": 1}, "netwrok": {}}' \
  > "$WORK/typo.json"
expect_error "unknown key 'netwrok'" "$BIN" plan --machine "$WORK/typo.json" "${GPT3[@]}" \
  --micro-batch-size 1
expect_error "has no 'bf16' entry" "$BIN" plan --machine "$WORK/cpu.json" "${GPT3[@]}" \
  --micro-batch-size 1
expect_error "--search needs --world-size" \
  "$BIN" plan --machine "$A100" "${GPT3[@]}" --search
expect_error "the vocabulary size is unknown" \
  "$BIN" plan --machine "$A100" --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --seq-length 32 --micro-batch-size 1
expect_error "--machine is required" "$BIN" plan "${GPT3[@]}" --micro-batch-size 1
expect_error "--bert-no-binary-head is a BERT option: give --model bert" \
  "$BIN" plan --machine "$A100" "${GPT3[@]}" --micro-batch-size 1 --bert-no-binary-head
expect_error "--post-layernorm is a BERT option: give --model bert" \
  "$BIN" plan --machine "$A100" "${GPT3[@]}" --micro-batch-size 1 --post-layernorm
expect_error "--post-layernorm: megatron-lm has no post-LayerNorm order" \
  "$BIN" plan --machine "$A100" "${BERT_PP[@]}" --post-layernorm --implementation megatron-lm
expect_error "--apply-residual-connection-post-layernorm applies to the pre-LayerNorm order only" \
  "$BIN" plan --machine "$A100" "${BERT_PP[@]}" --post-layernorm \
  --apply-residual-connection-post-layernorm
expect_error "--num-experts 16 is not divisible by --expert-model-parallel-size 3" \
  "$BIN" plan --machine "$A100" "${MOE[@]}" --world-size 3 --expert-model-parallel-size 3
# A model that does not fit is reported, not an error.
"$BIN" plan --machine "$A100" "${GPT3[@]}" --micro-batch-size 1 --implementation megatron-lm \
  | grep -q "DOES NOT FIT"
echo "plan e2e: OK"
