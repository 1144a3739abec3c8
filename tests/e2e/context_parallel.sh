#!/usr/bin/env bash
# Context parallelism (--context-parallel-size, docs/parallelism.md): a tiny GPT and a tiny
# Llama-family model (RoPE, grouped-query attention) trained on real text (State of the Union,
# GPT-2 BPE), dropout on, fp32, must log the same lm loss and grad norm at each of 6 iterations
# (relative <= 1e-5) at CP 1, CP 2, CP 4, CP 2 × DP 2, TP 2 × CP 2 with sequence parallelism,
# PP 2 × CP 2 (1F1B and interleaved), CP 2 with full recompute, and CP 2 with the distributed
# optimizer (sharded over DP × CP) — each CP rank holding only its two chunks of every
# sequence; bf16 at CP 2 follows CP 1 to 1e-3; a CP 2 × DP 2 checkpoint resumes at CP 1 and
# CP 4 with CP 1's losses. The other --cp-comm-types — all_gather, a2a (Ulysses) and a2a+p2p
# with --hierarchical-context-parallel-sizes, and a per-layer list — give CP 1's losses too, at
# CP 4 and with TP (sequence parallel), PP, DP and full recompute (a2a+p2p in bf16 to 1e-3). Unsupported combinations are refused with a
# sentence.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
export OMP_NUM_THREADS=1
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/e2e/sotu_gpt_data.bash
source "$MEGATRON_SOURCE_DIR/tests/e2e/sotu_gpt_data.bash"


GPT=(pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
  --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 8 --train-iters 6
  --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.01
  --clip-grad 1.0 --seed 1234 --use-flash-attn
  --data-path "$GPT_DATA" --split 949,50,1 --tokenizer-type GPT2BPETokenizer
  --vocab-file "$DATA_DIR/gpt2-vocab.json" --merge-file "$DATA_DIR/gpt2-merges.txt"
  --make-vocab-size-divisible-by 128 --log-interval 1 --eval-interval 1000 --eval-iters 0)
LLAMA=(--position-embedding-type rope --normalization RMSNorm --swiglu --ffn-hidden-size 96
  --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights
  --disable-bias-linear)

run() {  # run NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" "${GPT[@]}" --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name"; }
}
same() {  # same REFERENCE CANDIDATE
  echo "== $1 vs $2"
  $CHECK "$WORK/$1.jsonl" "$WORK/$2.jsonl" --from 1 --to 6 --rtol 1e-5
}

run gpt_cp1 1
run gpt_cp2 2 --context-parallel-size 2
run gpt_cp4 4 --context-parallel-size 4
run gpt_cp2_dp2 4 --context-parallel-size 2
run gpt_tp2_cp2_sp 4 --context-parallel-size 2 --tensor-model-parallel-size 2 --sequence-parallel
run gpt_pp2_cp2 4 --context-parallel-size 2 --pipeline-model-parallel-size 2
run gpt_cp2_recompute 2 --context-parallel-size 2 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 1
for name in gpt_cp2 gpt_cp4 gpt_cp2_dp2 gpt_tp2_cp2_sp gpt_pp2_cp2 gpt_cp2_recompute; do
  same gpt_cp1 "$name"
done

# The other communication types (parallel/context_parallel_attention.h): the same function.
run gpt_cp4_all_gather 4 --context-parallel-size 4 --cp-comm-type all_gather
run gpt_cp4_a2a 4 --context-parallel-size 4 --cp-comm-type a2a
run gpt_cp4_a2a_p2p 4 --context-parallel-size 4 --cp-comm-type a2a+p2p \
  --hierarchical-context-parallel-sizes 2 2
run gpt_tp2_cp2_a2a_sp 4 --context-parallel-size 2 --cp-comm-type a2a \
  --tensor-model-parallel-size 2 --sequence-parallel
run gpt_pp2_cp2_all_gather 4 --context-parallel-size 2 --cp-comm-type all_gather \
  --pipeline-model-parallel-size 2
run gpt_pp2_cp2_a2a_p2p 4 --context-parallel-size 2 --cp-comm-type a2a+p2p \
  --hierarchical-context-parallel-sizes 1 2 --pipeline-model-parallel-size 2
run gpt_cp2_dp2_per_layer 4 --context-parallel-size 2 --cp-comm-type a2a all_gather
run gpt_cp2_a2a_recompute 2 --context-parallel-size 2 --cp-comm-type a2a \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1
for name in gpt_cp4_all_gather gpt_cp4_a2a gpt_cp4_a2a_p2p gpt_tp2_cp2_a2a_sp \
  gpt_pp2_cp2_all_gather gpt_pp2_cp2_a2a_p2p gpt_cp2_dp2_per_layer gpt_cp2_a2a_recompute; do
  same gpt_cp1 "$name"
done

# The interleaved schedule: 4 layers, PP 2 × CP 2 with 2 model chunks per pipeline rank.
run gpt4_cp1 1 --num-layers 4
run gpt4_pp2_vp_cp2 4 --num-layers 4 --context-parallel-size 2 --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1
same gpt4_cp1 gpt4_pp2_vp_cp2

# bf16: the ring rounds each block's output and each merge to bf16 (the whole sequence's
# attention rounds once), so CP 2 follows CP 1 to bf16 rounding (1e-3; measured 8e-5).
run gpt_cp1_bf16 1 --bf16
run gpt_cp2_bf16 2 --bf16 --context-parallel-size 2
run gpt_cp4_a2a_p2p_bf16 4 --bf16 --context-parallel-size 4 --cp-comm-type a2a+p2p \
  --hierarchical-context-parallel-sizes 2 2
for name in gpt_cp2_bf16 gpt_cp4_a2a_p2p_bf16; do
  echo "== gpt_cp1_bf16 vs $name"
  $CHECK "$WORK/gpt_cp1_bf16.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-3
done

# Checkpoints do not depend on CP: CP 2 x DP 2 with the distributed optimizer (shards over
# dp x cp) saves at iteration 3; runs at CP 1 and CP 4 resume from it and log CP 1's losses.
run gpt_cp2_save 4 --context-parallel-size 2 --use-distributed-optimizer --save "$WORK/ckpt" \
  --save-interval 3 --exit-interval 3
run gpt_resume_cp1 1 --load "$WORK/ckpt"
run gpt_resume_cp4 4 --load "$WORK/ckpt" --context-parallel-size 4 --use-distributed-optimizer
for name in gpt_resume_cp1 gpt_resume_cp4; do
  echo "== gpt_cp1 vs $name (iterations 4-6, resumed from CP 2 x DP 2)"
  $CHECK "$WORK/gpt_cp1.jsonl" "$WORK/$name.jsonl" --from 4 --to 6 --rtol 1e-5
done

run llama_cp1 1 "${LLAMA[@]}"
run llama_cp2_distopt 4 "${LLAMA[@]}" --context-parallel-size 2 --use-distributed-optimizer
run llama_tp2_cp2 4 "${LLAMA[@]}" --context-parallel-size 2 --tensor-model-parallel-size 2
# Grouped-query attention (2 KV groups): Ulysses over 2 ranks, within the hierarchy's groups.
run llama_cp2_a2a 2 "${LLAMA[@]}" --context-parallel-size 2 --cp-comm-type a2a
run llama_cp4_a2a_p2p 4 "${LLAMA[@]}" --context-parallel-size 4 --cp-comm-type a2a+p2p \
  --hierarchical-context-parallel-sizes 2 2
run llama_tp2_cp2_all_gather 4 "${LLAMA[@]}" --context-parallel-size 2 \
  --tensor-model-parallel-size 2 --cp-comm-type all_gather
for name in llama_cp2_distopt llama_tp2_cp2 llama_cp2_a2a llama_cp4_a2a_p2p \
  llama_tp2_cp2_all_gather; do
  same llama_cp1 "$name"
done

# The comparisons must be able to fail: the loss moves over the 6 iterations, and a run that
# differs only in its seed is told apart from CP 1.
run gpt_cp2_other_seed 2 --context-parallel-size 2 --seed 4321
if $CHECK "$WORK/gpt_cp1.jsonl" "$WORK/gpt_cp2_other_seed.jsonl" --from 1 --to 6 --rtol 1e-5 \
  > /dev/null 2>&1; then
  fail "the metrics check cannot tell two different runs apart"
fi
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/gpt_cp1.jsonl"

echo "== refusals"
refused() {  # refused NAME NP EXPECTED-MESSAGE ARGS...
  local name=$1 np=$2 message=$3
  shift 3
  if timeout 120 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" "$@" > "$WORK/$name.log" 2>&1; then
    fail "$name was accepted"
  fi
  grep -qF -- "$message" "$WORK/$name.log" || { cat "$WORK/$name.log"; fail "$name: no '$message'"; }
  echo "   $name: $message"
}
refused comm_type 2 "--cp-comm-type 'ring' is not known" \
  "${GPT[@]}" --context-parallel-size 2 --cp-comm-type ring
refused a2a_heads 4 "--cp-comm-type a2a splits the attention heads over 4 ranks" \
  "${GPT[@]}" "${LLAMA[@]}" --context-parallel-size 4 --cp-comm-type a2a
refused hierarchy_missing 4 "--hierarchical-context-parallel-sizes must be set" \
  "${GPT[@]}" --context-parallel-size 4 --cp-comm-type a2a+p2p
refused hierarchy_product 4 "two positive sizes A P with A x P = --context-parallel-size 4" \
  "${GPT[@]}" --context-parallel-size 4 --cp-comm-type a2a+p2p \
  --hierarchical-context-parallel-sizes 2 1
refused per_layer 2 "--cp-comm-type gives 3 types for --num-layers 2" \
  "${GPT[@]}" --context-parallel-size 2 --cp-comm-type p2p a2a p2p
refused seq_length 2 "--seq-length 60 must be divisible by 2 x --context-parallel-size = 8" \
  "${GPT[@]}" --context-parallel-size 4 --seq-length 60 --max-position-embeddings 64
refused world 2 "must be divisible by --tensor-model-parallel-size 1 x --context-parallel-size 4" \
  "${GPT[@]}" --context-parallel-size 4
refused bert 1 "--context-parallel-size 2: context parallelism is implemented for pretrain-gpt only" \
  pretrain-bert --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
  --mock-data --vocab-size 128 --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 \
  --train-iters 1 --context-parallel-size 2
echo "context parallel: OK"
