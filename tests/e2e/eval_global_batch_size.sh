#!/usr/bin/env bash
# --eval-global-batch-size: validation batches of their own size. Training with global batch
# 8 and validating 2 batches of 4 (--eval-global-batch-size 4 --eval-iters 2) scores the same
# samples (the first 8 of the validation order at the first evaluation, the next 8 at the
# second) in the same micro-batches of 2 as validating 1 batch of 8, so both log the same
# validation losses (relative <= 1e-5); the training is identical. DP 2 splits each batch.
# A size that micro-batch x DP does not divide is refused, naming the flag.
set -euo pipefail
TINY_GPT_FLAGS=(--train-iters 4 --eval-interval 2)
source "$(dirname "$0")/tiny_gpt_run.bash"

run eval_gbs8 2 1 1 --eval-iters 1
run eval_gbs4 2 1 1 --eval-iters 2 --eval-global-batch-size 4
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_validation.js" "$WORK/eval_gbs8.jsonl" \
  "$WORK/eval_gbs4.jsonl"
$CHECK "$WORK/eval_gbs8.jsonl" "$WORK/eval_gbs4.jsonl" --from 1 --to 4 --exact

if "$MEGATRON_BINARY" pretrain-gpt --num-layers 1 --hidden-size 32 --num-attention-heads 2 \
  --seq-length 16 --mock-data --vocab-size 64 --micro-batch-size 2 --global-batch-size 8 \
  --eval-global-batch-size 3 --lr 1e-3 --train-iters 1 > "$WORK/bad.log" 2>&1; then
  echo "FAIL: --eval-global-batch-size 3 was accepted with micro-batches of 2"; exit 1
fi
grep -q -- "--eval-global-batch-size 3 must be a positive multiple" "$WORK/bad.log" || {
  cat "$WORK/bad.log"; echo "FAIL: unclear refusal"; exit 1; }
echo "eval global batch size: OK"
