#!/usr/bin/env bash
# --step-batch-size-schedule end to end, at DP 2: the global batch size of each iteration,
# consumed samples and learning rates follow Megatron's rules (expected values worked out by
# hand below), a checkpoint is saved where the number of micro-batches changes (as Megatron
# does), and a run stopped mid-ramp (iteration 6) resumes with bit-identical losses.
# --train-samples with a schedule trains until the samples are reached.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

# Thresholds are tokens: at --seq-length 32, 256 tokens = 8 samples and 768 tokens = 24.
run() {  # run NAME [FLAGS...] — 2 processes, TP 1, DP 2, micro-batch 1
  local name=$1
  shift
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size 1 --step-batch-size-schedule "0:2 256:4 768:8" \
    --lr 1e-3 --lr-decay-style cosine --min-lr 1e-4 \
    --seed 7 --log-interval 1 --eval-interval 4 --eval-iters 1 \
    --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}

ITERS=(--train-iters 12 --lr-warmup-iters 3 --save-interval 6)
run full "${ITERS[@]}" --save "$WORK/ckpt_full"
run first_half "${ITERS[@]}" --save "$WORK/ckpt" --exit-interval 6
run resumed "${ITERS[@]}" --load "$WORK/ckpt" --save "$WORK/ckpt"
run by_samples --train-samples 40 --lr-warmup-samples 6

echo "== batch sizes, consumed samples and learning rates of the uninterrupted run"
# Batches 2 until 8 samples are consumed, 4 until 24, then 8. Megatron's LR with a schedule
# and --train-iters counts iterations as micro-batch x DP = 2 samples: warm-up 3 x 2 = 6,
# decay 12 x 2 = 24 samples, stepped by each iteration's global batch.
node -e '
  const fs = require("fs");
  const rows = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
                 .filter(r => r.type === "train");
  const batches = rows.map(r => r.global_batch_size).join(" ");
  const consumed = rows.map(r => r.consumed_samples).join(" ");
  const fail = (m) => { console.error("FAIL:", m); process.exit(1); };
  if (batches !== "2 2 2 2 4 4 4 4 8 8 8 8") fail("global batch sizes " + batches);
  if (consumed !== "2 4 6 8 12 16 20 24 32 40 48 56") fail("consumed samples " + consumed);
  const lr = (it) => rows.find(r => r.iteration === it).learning_rate;
  const close = (a, b) => Math.abs(a - b) <= 1e-12 + 1e-9 * Math.abs(b);
  // Iteration 1, 2 samples: warm-up, 1e-3 * 2/6. Iteration 5, 12 samples: cosine at
  // (12-6)/(24-6) = 1/3, 1e-4 + 9e-4 * 0.5 * (1 + cos(pi/3)) = 7.75e-4. Iteration 9,
  // 32 samples: past the decay, 1e-4.
  for (const [it, want] of [[1, 1e-3 * 2 / 6], [5, 7.75e-4], [9, 1e-4]])
    if (!close(lr(it), want)) fail(`learning rate at iteration ${it}: ${lr(it)}, expected ${want}`);
' "$WORK/full.jsonl"
grep -q "global batch size:     8 |" "$WORK/full.log" || { echo "FAIL: log line"; exit 1; }

echo "== a checkpoint where the number of micro-batches changed (iterations 4 and 8)"
for it in 0000004 0000006 0000008 0000012; do
  [[ -d "$WORK/ckpt_full/iter_$it" ]] || { echo "FAIL: no checkpoint iter_$it"; exit 1; }
done

echo "== resumed mid-ramp at iteration 6: iterations 7-12 bit for bit"
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
$CHECK "$WORK/full.jsonl" "$WORK/first_half.jsonl" --from 1 --to 6 --exact
$CHECK "$WORK/full.jsonl" "$WORK/resumed.jsonl" --from 7 --to 12 --exact
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
                 .map(JSON.parse).filter(r => r.type === "train");
  const batches = rows.map(r => r.global_batch_size).join(" ");
  if (rows[0].iteration !== 7 || batches !== "4 4 8 8 8 8") {
    console.error("FAIL: resumed run logs", rows.map(r => r.iteration), batches);
    process.exit(1);
  }' "$WORK/resumed.jsonl"

echo "== --train-samples 40: 4 x 2 + 4 x 4 + 2 x 8 = 40 samples in 10 iterations"
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
                 .map(JSON.parse).filter(r => r.type === "train");
  const last = rows[rows.length - 1];
  if (last.iteration !== 10 || last.consumed_samples !== 40) {
    console.error("FAIL: --train-samples run ended at", last.iteration, last.consumed_samples);
    process.exit(1);
  }' "$WORK/by_samples.jsonl"
echo "batch size schedule: OK"
