#!/usr/bin/env bash
# --fp16 on a GPU against the CPU: dynamic loss scaling starts at 2^24, so the first iterations
# overflow in f16 and are skipped while the scale halves (window 2), until it fits and training
# proceeds. On cuda:0 the overflow checks run on the device; the skip decisions, the loss scale
# of every iteration and the losses and grad norms of the steps taken must be the CPU run's
# (relative <= 1e-3: f16 activations). Exits 77 (CTest's skip) when the binary has no CUDA or no
# GPU is visible.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/gpu_or_skip.bash"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

FLAGS=(pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --max-position-embeddings 32 --mock-data --vocab-size 128
       --make-vocab-size-divisible-by 32 --micro-batch-size 8 --global-batch-size 8 --lr 1e-3
       --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --seed 42 --log-interval 1
       --eval-interval 1000 --eval-iters 0 --train-iters 16 --fp16
       --initial-loss-scale 16777216 --loss-scale-window 2 --distributed-backend mpi)

run_on_gpu_and_cpu "--fp16" "${FLAGS[@]}"

echo "== --fp16: CPU vs cuda:0 (skip decisions, loss scales, losses)"
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/cpu.jsonl" "$WORK/cuda:0.jsonl" \
  --from 1 --to 16 --rtol 1e-3
# The comparison means something only if both kinds of iteration happened.
node -e '
  const r = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
              .map(JSON.parse).filter((x) => x.type === "train");
  const skipped = r.filter((x) => x.lm_loss === null).length;
  if (skipped === 0 || skipped === r.length)
    throw new Error(`expected both skipped and taken steps, got ${skipped} skipped of ${r.length}`);
  console.log(`${skipped} skipped, ${r.length - skipped} taken`);
' "$WORK/cuda:0.jsonl"
echo "--fp16 on a GPU: OK"
