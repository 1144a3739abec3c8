#!/usr/bin/env bash
# Exact resume: a run of 12 iterations, and a run that stops after saving at iteration 6
# (--exit-interval) then resumes from that checkpoint, log bit-identical iterations 7-12. A
# resume at another TP size (TP1·DP2 → TP2·DP1) agrees to fp32 tolerance.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

run() {  # run NAME TP [FLAGS...] — always 2 processes
  local name=$1 tp=$2
  shift 2
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size 2 --global-batch-size 8 --train-iters 12 \
    --lr 1e-3 --lr-warmup-iters 3 --lr-decay-style cosine --min-lr 1e-4 \
    --seed 7 --tensor-model-parallel-size "$tp" --log-interval 1 \
    --eval-interval 4 --eval-iters 1 --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}

CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"

run full 1 --save "$WORK/ckpt_full" --save-interval 6
run first_half 1 --save "$WORK/ckpt" --save-interval 6 --exit-interval 6
[[ $(cat "$WORK/ckpt/latest_checkpointed_iteration.txt") == 6 ]] || { echo "FAIL: tracker"; exit 1; }
grep -q "exiting program at iteration 6" "$WORK/first_half.log" || { echo "FAIL: no exit at 6"; exit 1; }
cp -r "$WORK/ckpt" "$WORK/ckpt_tp2"
run resumed 1 --load "$WORK/ckpt" --save "$WORK/ckpt" --save-interval 6
run resumed_tp2 2 --load "$WORK/ckpt_tp2"

echo "== first half equals the uninterrupted run"
$CHECK "$WORK/full.jsonl" "$WORK/first_half.jsonl" --from 1 --to 6 --exact
echo "== resumed run, iterations 7-12, bit for bit"
$CHECK "$WORK/full.jsonl" "$WORK/resumed.jsonl" --from 7 --to 12 --exact
node -e '
  const r = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
              .map(JSON.parse).filter(x => x.type === "train");
  if (r.length !== 6 || r[0].iteration !== 7) {
    console.error("the resumed run must log exactly iterations 7-12, got",
                  r.map(x => x.iteration)); process.exit(1);
  }' "$WORK/resumed.jsonl"
echo "== resumed at TP 2, iterations 7-12, rtol 1e-5"
$CHECK "$WORK/full.jsonl" "$WORK/resumed_tp2.jsonl" --from 7 --to 12 --rtol 1e-5
# The validation losses after resume match too.
node -e '
  const fs = require("fs");
  const val = p => fs.readFileSync(p, "utf8").trim().split("\n").map(JSON.parse)
                    .filter(r => r.type === "validation" && r.iteration === 12).map(r => r.lm_loss);
  const a = val(process.argv[1]), b = val(process.argv[2]);
  if (a.length === 0 || JSON.stringify(a) !== JSON.stringify(b)) {
    console.error("validation at 12 differs:", a, b); process.exit(1);
  }' "$WORK/full.jsonl" "$WORK/resumed.jsonl"
echo "exact resume: OK"
