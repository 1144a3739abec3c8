#!/usr/bin/env bash
# --overlap-grad-reduce changes when the data-parallel gradient buckets are reduced, never what
# they hold: one seed, global batch 8, dropout on, fp32, 4 layers, 20000-element buckets (about
# three per layer, so buckets really launch during the backward). Each layout run with and
# without the flag must log bit-identical lm loss and grad norm at each of 6 iterations:
#   TP×PP×DP 1×1×2 and 1×1×4, each with and without --use-distributed-optimizer (its
#   reduce-scatter per bucket); 1×2×2 (pipelining: a stage's buckets are complete after its last
#   backward); 2×1×2 with --sequence-parallel (the TP sum of each bucket's norm gradients);
#   1×2×2 with the Llama options (an untied output layer) and the distributed optimizer; 1×1×2
#   with --fp16 (the loss scale stays in the buckets), with --fp16 and the distributed optimizer
#   (the overflow check on each shard), and with --bf16.
# And the overlapped 1×1×4 matches 1×1×1 without it (relative <= 1e-5).
set -euo pipefail
: "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/tiny_gpt_run.bash"
TINY_GPT_FLAGS=(--train-iters 6 --eval-interval 1000 --eval-iters 0 --ddp-bucket-size 20000)
LLAMA=(--ffn-hidden-size 96 --position-embedding-type rope --normalization RMSNorm --swiglu
  --untie-embeddings-and-output-weights --disable-bias-linear)

pair() {  # pair NAME NP TP PP [FLAGS...]: the run with and without the flag, compared exactly
  local name=$1
  shift
  run "$name" "$@"
  run "${name}_overlap" "$@" --overlap-grad-reduce
  echo "== $name: with and without --overlap-grad-reduce"
  $CHECK "$WORK/$name.jsonl" "$WORK/${name}_overlap.jsonl" --from 1 --to 6 --exact
}

pair t1p1d2 2 1 1
pair t1p1d4 4 1 1
pair t1p1d2_distopt 2 1 1 --use-distributed-optimizer
pair t1p1d4_distopt 4 1 1 --use-distributed-optimizer
pair t1p2d2 4 1 2
pair t2p1d2_sp 4 2 1 --sequence-parallel
pair t1p2d2_llama_distopt 4 1 2 "${LLAMA[@]}" --use-distributed-optimizer
pair t1p1d2_fp16 2 1 1 --fp16
pair t1p1d2_fp16_distopt 2 1 1 --fp16 --use-distributed-optimizer
pair t1p1d2_bf16 2 1 1 --bf16

run t1p1d1 1 1 1
echo "== 1x1x1 vs 1x1x4 with --overlap-grad-reduce"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/t1p1d4_overlap.jsonl" --from 1 --to 6 --rtol 1e-5
echo "overlap-grad-reduce: OK"
