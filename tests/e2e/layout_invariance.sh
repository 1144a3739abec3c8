#!/usr/bin/env bash
# Layout invariance: one seed, one global batch (8), dropout on, fp32 — TP1·DP1, TP2·DP1,
# TP1·DP2, TP2·DP2, TP4·DP1, DP1 with 1, 2 and 4 micro-batches of accumulation, and TP1·DP2 with
# --overlap-grad-reduce (small buckets, reduced during the backward) must log the same lm loss
# and grad norm at each of 10 iterations (relative <= 1e-5).
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

run() {  # run NAME NP TP MICRO [FLAGS...]
  local name=$1 np=$2 tp=$3 micro=$4
  shift 4
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size "$micro" --global-batch-size 8 --train-iters 10 \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
    --clip-grad 1.0 --seed 42 --tensor-model-parallel-size "$tp" --log-interval 1 \
    --eval-interval 1000 --eval-iters 0 --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}

run tp1_dp1 1 1 8
run tp1_dp1_acc2 1 1 4
run tp1_dp1_acc4 1 1 2
run tp2_dp1 2 2 8
run tp1_dp2 2 1 4
run tp2_dp2 4 2 4
run tp4_dp1 4 4 8
run tp1_dp2_overlap 2 1 4 --overlap-grad-reduce --ddp-bucket-size 10000

CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
for name in tp1_dp1_acc2 tp1_dp1_acc4 tp2_dp1 tp1_dp2 tp2_dp2 tp4_dp1 tp1_dp2_overlap; do
  echo "== tp1_dp1 vs $name"
  $CHECK "$WORK/tp1_dp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 10 --rtol 1e-5
done
# The check must be able to fail: the loss has to move over the 10 iterations.
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 10 "$WORK/tp1_dp1.jsonl"
echo "layout invariance: OK"
