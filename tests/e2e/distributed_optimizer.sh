#!/usr/bin/env bash
# The distributed optimizer (--use-distributed-optimizer): the same run — one seed, global batch
# 8, dropout on, fp32 — at TP×PP×DP 1×1×1 without it and at 1×1×4 and 1×2×2 with it logs the same
# lm loss and grad norm at each iteration (relative <= 1e-5). Its checkpoints hold full optimizer
# buffers: one saved at 1×1×4 (sharded) resumes at 1×1×2 without the distributed optimizer, and
# one saved at 1×1×1 resumes sharded at 1×1×4, both with the uninterrupted run's next losses.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

run() {  # run NAME NP PP [FLAGS...]
  local name=$1 np=$2 pp=$3
  shift 3
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size 2 --global-batch-size 8 --train-iters 8 \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
    --clip-grad 1.0 --seed 42 --pipeline-model-parallel-size "$pp" --log-interval 1 \
    --eval-interval 1000 --eval-iters 0 --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}

run plain 1 1 --save "$WORK/ckpt_plain" --save-interval 4
run sharded_d4 4 1 --use-distributed-optimizer --save "$WORK/ckpt_d4" --save-interval 4 \
  --exit-interval 4
run sharded_p2d2 4 2 --use-distributed-optimizer
run resumed_d2 2 1 --load "$WORK/ckpt_d4"
mkdir "$WORK/ckpt_plain4" && cp -r "$WORK/ckpt_plain/iter_0000004" "$WORK/ckpt_plain4/" &&
  echo 4 > "$WORK/ckpt_plain4/latest_checkpointed_iteration.txt"
run resumed_sharded_d4 4 1 --use-distributed-optimizer --load "$WORK/ckpt_plain4"

CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
echo "== 1x1x1 vs 1x1x4 sharded (iterations 1-4, then it saves and exits)"
$CHECK "$WORK/plain.jsonl" "$WORK/sharded_d4.jsonl" --from 1 --to 4 --rtol 1e-5
echo "== 1x1x1 vs 1x2x2 sharded"
$CHECK "$WORK/plain.jsonl" "$WORK/sharded_p2d2.jsonl" --from 1 --to 8 --rtol 1e-5
echo "== 1x1x4 sharded checkpoint resumed at 1x1x2 unsharded"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_d2.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== 1x1x1 checkpoint resumed at 1x1x4 sharded"
$CHECK "$WORK/plain.jsonl" "$WORK/resumed_sharded_d4.jsonl" --from 5 --to 8 --rtol 1e-5
echo "distributed optimizer: OK"
