#!/usr/bin/env bash
# Every inconsistent or missing argument of `megatron pretrain-gpt` fails before any work:
# non-zero exit, a message naming the flag and the rule, and no hang (also under mpirun).
set -uo pipefail
: "${MEGATRON_BINARY:?}"
export OMP_NUM_THREADS=1
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 4 --train-iters 1 --lr 1e-3
      --mock-data --vocab-size 128 --log-interval 1)
failures=0

# expect_error "EXPECTED SUBSTRING" [NP] -- FLAGS...
expect_error() {
  local expected=$1 np=1
  shift
  if [[ $1 != -- ]]; then np=$1; shift; fi
  shift  # --
  local out status
  if [[ $np == 1 ]]; then
    out=$(timeout 60 "$MEGATRON_BINARY" pretrain-gpt "$@" 2>&1)
  else
    out=$(timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
          "$MEGATRON_BINARY" pretrain-gpt "$@" 2>&1)
  fi
  status=$?
  if [[ $status == 0 || $status == 124 ]]; then
    echo "FAIL (exit $status, expected an error) for: $*"
    failures=$((failures + 1))
  elif [[ $out != *"$expected"* ]]; then
    echo "FAIL: expected '$expected' in the output for: $*"
    echo "$out" | tail -5
    failures=$((failures + 1))
  else
    echo "ok: $expected"
  fi
}

# Each case builds its own list from BASE (a repeated flag would also work: the last wins).
with() {  # with FLAG VALUE: BASE with FLAG's value replaced (or appended)
  local flag=$1 value=$2 out=() i=0 found=0
  while (( i < ${#BASE[@]} )); do
    if [[ ${BASE[i]} == "$flag" ]]; then out+=("$flag" "$value"); i=$((i + 2)); found=1
    else out+=("${BASE[i]}"); i=$((i + 1)); fi
  done
  (( found )) || out+=("$flag" "$value")
  printf '%s\n' "${out[@]}"
}
without() {  # without FLAG [TAKES_VALUE]
  local flag=$1 takes=${2:-1} out=() i=0
  while (( i < ${#BASE[@]} )); do
    if [[ ${BASE[i]} == "$flag" ]]; then i=$((i + 1 + takes))
    else out+=("${BASE[i]}"); i=$((i + 1)); fi
  done
  printf '%s\n' "${out[@]}"
}

mapfile -t A < <(with --hidden-size 66)
expect_error "--hidden-size 66 must be divisible by --num-attention-heads 4" -- "${A[@]}"
mapfile -t A < <(with --tensor-model-parallel-size 8)
expect_error "--num-attention-heads 4 must be divisible by --tensor-model-parallel-size 8" -- "${A[@]}"
mapfile -t A < <(with --tensor-model-parallel-size 2)
expect_error "world size 1 (number of processes) must be divisible by --tensor-model-parallel-size 2" -- "${A[@]}"
mapfile -t A < <(with --tensor-model-parallel-size 4)
expect_error "world size 2 (number of processes) must be divisible by --tensor-model-parallel-size 4" 2 -- "${A[@]}"
mapfile -t A < <(with --global-batch-size 5)
expect_error "--global-batch-size 5 must be a positive multiple of --micro-batch-size 2" -- "${A[@]}"
mapfile -t A < <(with --global-batch-size 2)
expect_error "--global-batch-size 2 must be a positive multiple of --micro-batch-size 2 x data-parallel size 2" 2 -- "${A[@]}"
expect_error "--no-such-flag" -- "${BASE[@]}" --no-such-flag 3
# --step-batch-size-schedule (thresholds in tokens): Megatron's rules, and a batch size that does
# not split into micro-batches, refused before the first step.
mapfile -t A < <(without --global-batch-size)
expect_error "--step-batch-size-schedule entry \"x:8\": 'x' is not a number" -- "${A[@]}" \
  --step-batch-size-schedule "0:4 x:8"
expect_error "--step-batch-size-schedule: the first schedule entry must have threshold 0" -- \
  "${A[@]}" --step-batch-size-schedule "5K:4"
expect_error "the batch size 7 from 31 consumed samples on is not divisible" -- "${A[@]}" \
  --step-batch-size-schedule "0:4 1K:7"
expect_error "Cannot specify both --step-batch-size-schedule and --global-batch-size" -- \
  "${BASE[@]}" --step-batch-size-schedule "0:4"
mapfile -t A < <(without --mock-data 0)
expect_error "no training data: give --data-path" -- "${A[@]}"
mapfile -t A < <(with --pipeline-model-parallel-size 2)
expect_error "world size 1 (number of processes) must be divisible by --tensor-model-parallel-size 1 x --pipeline-model-parallel-size 2" -- "${A[@]}"
mapfile -t A < <(with --num-layers 3)
expect_error "--num-layers 3 is not divisible by --pipeline-model-parallel-size 2" 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2
expect_error "--num-layers-per-virtual-pipeline-stage 3 must divide --num-layers 2 / --pipeline-model-parallel-size 2" \
  2 -- "${BASE[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 3
mapfile -t A < <(with --global-batch-size 2)
mapfile -t A < <(BASE=("${A[@]}"); with --num-layers 4)  # 2 chunks of 1 layer, 1 micro-batch
expect_error "the interleaved schedule needs the number of micro-batches (1" 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1
# Megatron's uneven pipeline splits and the interleaved schedule's groups: each bad value named.
mapfile -t A < <(with --num-layers 4)
expect_error "--decoder-first-pipeline-num-layers must be positive, got 0" 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 0
expect_error "--num-layers 4 leaves 1 layers after --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers for the other 3 pipeline stages" \
  4 -- "${A[@]}" --pipeline-model-parallel-size 4 --decoder-first-pipeline-num-layers 3
expect_error "--decoder-first-pipeline-num-layers 3 and --decoder-last-pipeline-num-layers 2 ask for more than the 4 layers" \
  2 -- "${A[@]}" --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 3 \
  --decoder-last-pipeline-num-layers 2
expect_error "--decoder-first-pipeline-num-layers 1 must be a multiple of the 2 virtual stages per pipeline rank" \
  2 -- "${A[@]}" --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1 \
  --num-virtual-stages-per-pipeline-rank 2
expect_error "give --num-virtual-stages-per-pipeline-rank instead" 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 2 \
  --num-layers-per-virtual-pipeline-stage 1
expect_error "cannot be combined with --account-for-embedding-in-pipeline-split" 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --decoder-last-pipeline-num-layers 1 \
  --account-for-loss-in-pipeline-split
expect_error "--num-layers 4 (+ 1 for the embedding, --account-for-*-in-pipeline-split) is not divisible by --pipeline-model-parallel-size 2" \
  2 -- "${A[@]}" --pipeline-model-parallel-size 2 --account-for-embedding-in-pipeline-split
expect_error "both set the virtual stages: give one of them" 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --num-virtual-stages-per-pipeline-rank 2
# Megatron's layout string: its grammar, its layers against --num-layers, the flags it excludes.
expect_error '--pipeline-model-parallel-layout "Ett| ttL": a space is not a layer symbol' 2 -- \
  "${A[@]}" --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Ett| ttL"
expect_error 'holds 3 transformer layers (t), but --num-layers is 4' 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Ett|tL"
expect_error 'give neither --num-layers-per-virtual-pipeline-stage nor' 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Et|t|t|tL" \
  --num-virtual-stages-per-pipeline-rank 2
expect_error 'cannot be combined with --decoder-first-pipeline-num-layers' 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Ett|ttL" \
  --decoder-first-pipeline-num-layers 2
expect_error "places 1 MTP layers ('m'), but --mtp-num-layers is 0" 2 -- "${A[@]}" \
  --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Ett|ttmL"
expect_error "standalone MTP) is not implemented" 2 -- "${A[@]}" --mtp-num-layers 1 \
  --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "Ettm|ttL"
expect_error "with --context-parallel-size > 1 is not implemented" 2 -- "${A[@]}" \
  --mtp-num-layers 1 --context-parallel-size 2
expect_error "--mtp-num-layers must be at least 1, got 0" 2 -- "${A[@]}" --mtp-num-layers 0
expect_error "multi-token prediction is pretrain-gpt's --mtp-num-layers" 2 -- "${A[@]}" \
  --mtp-num-layers 1 --mtp-use-repeated-layer
expect_error "--microbatch-group-size-per-virtual-pipeline-stage 1 must lie between --pipeline-model-parallel-size 2 and the number of micro-batches (2" \
  2 -- "${A[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --microbatch-group-size-per-virtual-pipeline-stage 1
mapfile -t A < <(BASE=("${A[@]}"); without --global-batch-size)
# Each batch size of a schedule is checked, not the global batch size it implies (2: 1).
expect_error "the interleaved schedule needs the number of micro-batches (3 = the global batch size 6 of --step-batch-size-schedule" \
  2 -- "${A[@]}" --pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 \
  --step-batch-size-schedule "0:4 1K:6"
mapfile -t A < <(without --lr)
expect_error "--lr must be given" -- "${A[@]}"
mapfile -t A < <(without --train-iters)
expect_error "exactly one of --train-iters and --train-samples" -- "${A[@]}"
mapfile -t A < <(without --num-layers)
expect_error "--num-layers must be given and positive" -- "${A[@]}"
expect_error "--bf16 and --fp16 cannot both be given" -- "${BASE[@]}" --bf16 --fp16
mapfile -t A < <(with --lr-decay-style exponential)
expect_error "--lr-decay-style must be constant, linear, cosine, inverse-square-root or WSD, got 'exponential'" -- "${A[@]}"
mapfile -t A < <(with --seq-length 64)
expect_error "--max-position-embeddings 32 must be >= --seq-length 64" -- "${A[@]}" --max-position-embeddings 32
mapfile -t A < <(without --mock-data 0)
# pretrain_gpt.py's default tokenizer, GPT-2 BPE, needs its files.
expect_error "--vocab-file is required for --tokenizer-type GPT2BPETokenizer" -- "${A[@]}" --data-path /nonexistent/corpus_text_document
mapfile -t A < <(without --mock-data 0)
expect_error "cannot open '/nonexistent/corpus_text_document.idx'" -- "${A[@]}" \
  --data-path /nonexistent/corpus_text_document --tokenizer-type NullTokenizer
expect_error "cannot open '/nonexistent/corpus_text_document.idx'" 2 -- "${A[@]}" \
  --data-path /nonexistent/corpus_text_document --tokenizer-type NullTokenizer
mapfile -t A < <(without --vocab-size)
expect_error "--vocab-file '/nonexistent/vocab.json' cannot be read" -- "${A[@]}" \
  --tokenizer-type GPT2BPETokenizer --vocab-file /nonexistent/vocab.json --merge-file /nonexistent/merges.txt
expect_error "--mock-data needs --vocab-size" -- "${A[@]}"
expect_error "--save-interval needs --save DIR" -- "${BASE[@]}" --save-interval 5
expect_error "--recompute-granularity 'block' is not known: expected full or selective" -- "${BASE[@]}" --recompute-granularity block
expect_error "--recompute-activations means --recompute-granularity selective" -- "${BASE[@]}" \
  --recompute-activations --recompute-granularity full
expect_error "--recompute-method chooses which layers full recompute re-runs; with --recompute-granularity selective it is refused (as in Megatron-LM): drop it" \
  -- "${BASE[@]}" --recompute-granularity selective --recompute-method block
expect_error "--recompute-method 'blocks' is not known: expected uniform or block" -- "${BASE[@]}" \
  --recompute-granularity full --recompute-method blocks
expect_error "--recompute-method uniform recomputes one layer at a time here, so --recompute-num-layers must be 1 (got 2)" \
  -- "${BASE[@]}" --recompute-granularity full --recompute-num-layers 2
expect_error "asks for more layers than the" -- "${BASE[@]}" --recompute-granularity full \
  --recompute-method block --recompute-num-layers 99
expect_error "--lr-warmup-fraction cannot be combined" -- "${BASE[@]}" --lr-warmup-fraction 0.1 --lr-warmup-iters 5
expect_error "--use-rope-scaling scales RoPE frequencies: it needs --position-embedding-type rope" \
  -- "${BASE[@]}" --use-rope-scaling
# Multi-latent attention (docs/model.md): its RoPE type and shape.
expect_error "--rope-type yarn applies to --multi-latent-attention only" -- "${BASE[@]}" \
  --rope-type yarn
expect_error "--rope-type 'ntk' is not known: expected rope or yarn" -- "${BASE[@]}" \
  --multi-latent-attention --rope-type ntk
expect_error "--multi-latent-attention takes YaRN's original context, betas and rounding from Megatron-Core's defaults" \
  -- "${BASE[@]}" --multi-latent-attention --rotary-scaling-factor 40 --yarn-beta-fast 16
expect_error "--position-embedding-type yarn rotates whole heads at YaRN's own frequencies" \
  -- "${BASE[@]}" --position-embedding-type yarn --rotary-percent 0.5
expect_error "--position-embedding-type yarn does not rotate interleaved channel pairs" \
  -- "${BASE[@]}" --position-embedding-type yarn --rotary-interleaved
expect_error "YaRN needs a positive --rotary-scaling-factor" \
  -- "${BASE[@]}" --position-embedding-type yarn --rotary-scaling-factor 0
expect_error "--v-head-dim 200 must not exceed --qk-head-dim + --qk-pos-emb-head-dim = 192" \
  -- "${BASE[@]}" --multi-latent-attention --v-head-dim 200
expect_error "--group-query-attention and --multi-latent-attention exclude one another" \
  -- "${BASE[@]}" --multi-latent-attention --group-query-attention --num-query-groups 2
expect_error "--cache-mla-latents: caches MLA's latents in Megatron's dynamic inference engine" \
  -- "${BASE[@]}" --multi-latent-attention --cache-mla-latents

# What Megatron-LM accepts with a warning (and does): --sequence-parallel at TP 1 trains without
# it; --recompute-method/--recompute-num-layers without full recompute are ignored.
expect_warning() {
  local expected=$1
  shift
  local out status
  out=$(timeout 120 "$MEGATRON_BINARY" pretrain-gpt "$@" 2>&1)
  status=$?
  if [[ $status != 0 ]]; then
    echo "FAIL (exit $status, expected a warning and a run) for: $*"
    echo "$out" | tail -5
    failures=$((failures + 1))
  elif [[ $out != *"WARNING: $expected"* ]]; then
    echo "FAIL: expected the warning '$expected' for: $*"
    failures=$((failures + 1))
  else
    echo "ok (warned): $expected"
  fi
}
expect_warning "Disabling sequence parallelism because tensor model parallelism is disabled" \
  "${BASE[@]}" --sequence-parallel
expect_warning "--recompute-method and --recompute-num-layers have no effect without --recompute-granularity full" \
  "${BASE[@]}" --recompute-method block --recompute-num-layers 99
expect_warning "--microbatch-group-size-per-virtual-pipeline-stage has no effect without the interleaved schedule" \
  "${BASE[@]}" --microbatch-group-size-per-virtual-pipeline-stage 4

if (( failures )); then echo "$failures argument-error cases failed"; exit 1; fi
echo "all argument-error cases passed"
