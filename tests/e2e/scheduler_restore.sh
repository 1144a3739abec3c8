#!/usr/bin/env bash
# How a resumed run's learning-rate schedule meets the checkpoint's, as in Megatron-LM
# (optim/lr_schedule.h): a tiny GPT trains 8 iterations uninterrupted, and again to a
# checkpoint at iteration 4 (--exit-interval 4), then resumes to 8:
#   - with the same flags: iterations 5-8 bit-identical to the uninterrupted run;
#   - with another --lr and neither flag: refused, naming --lr, both values and the two flags;
#   - with another --lr, --min-lr and decay style and --use-checkpoint-opt_param-scheduler: the
#     checkpoint's schedule, so again bit-identical to the uninterrupted run;
#   - with --lr 2e-3 and --override-opt_param-scheduler: the command line's schedule from the
#     checkpoint's sample count — the learning rates equal Megatron's formula computed here;
#   - with both flags: refused before any work.
set -euo pipefail
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0 --eval-interval 1000)
source "$(dirname "$0")/tiny_gpt_run.bash"

run full 1 1 1
run part 1 1 1 --save "$WORK/ckpt" --save-interval 4 --exit-interval 4
[[ $(cat "$WORK/ckpt/latest_checkpointed_iteration.txt") == 4 ]] || { echo "no checkpoint at 4"; exit 1; }
cp -r "$WORK/ckpt" "$WORK/pristine"
fresh() { rm -rf "$WORK/ckpt" && cp -r "$WORK/pristine" "$WORK/ckpt"; }

run same 1 1 1 --load "$WORK/ckpt"
$CHECK "$WORK/full.jsonl" "$WORK/same.jsonl" --from 5 --to 8 --exact

# Megatron's default: the command line's settings must equal the checkpoint's.
fresh
if timeout 300 "$MEGATRON_BINARY" pretrain-gpt --num-layers 4 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --mock-data \
  --vocab-size 128 --make-vocab-size-divisible-by 32 --micro-batch-size 2 --global-batch-size 8 \
  --lr 2e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
  --clip-grad 1.0 --seed 42 --train-iters 8 --eval-iters 0 --load "$WORK/ckpt" \
  > "$WORK/mismatch.log" 2>&1; then
  echo "a resume with another --lr and neither scheduler flag should fail"; exit 1
fi
for part in "the checkpoint's learning-rate schedule has --lr 0.001, the command line 0.002" \
  "--override-opt_param-scheduler" "--use-checkpoint-opt_param-scheduler"; do
  grep -qF -- "$part" "$WORK/mismatch.log" || { cat "$WORK/mismatch.log"; echo "missing: $part"; exit 1; }
done

fresh
run from_checkpoint 1 1 1 --load "$WORK/ckpt" --lr 2e-3 --min-lr 0 --lr-decay-style linear \
  --use-checkpoint-opt_param-scheduler
$CHECK "$WORK/full.jsonl" "$WORK/from_checkpoint.jsonl" --from 5 --to 8 --exact
grep -q "using checkpoint value 0.001 for --lr" "$WORK/from_checkpoint.log" ||
  { cat "$WORK/from_checkpoint.log"; echo "no log of the restored --lr"; exit 1; }

fresh
run overridden 1 1 1 --load "$WORK/ckpt" --lr 2e-3 --override-opt_param-scheduler
# Iteration i logs the rate after its step, the schedule at i · 8 samples (as Megatron prints
# it): warmup 16, decay 64 samples, cosine from 2e-3 to 1e-4 (OptimizerParamScheduler.get_lr).
node -e '
const fs = require("fs");
const lines = fs.readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
  .filter((l) => l.type === "train");
if (lines.length !== 4) { console.error("expected iterations 5-8, got", lines.length); process.exit(1); }
for (const l of lines) {
  const samples = l.iteration * 8, ratio = (samples - 16) / (64 - 16);
  const want = 1e-4 + 0.5 * (Math.cos(Math.PI * ratio) + 1) * (2e-3 - 1e-4);
  if (Math.abs(l.learning_rate - want) > 1e-12 * want) {
    console.error(`iteration ${l.iteration}: learning rate ${l.learning_rate}, want ${want}`);
    process.exit(1);
  }
}' "$WORK/overridden.jsonl"

if err=$("$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --seq-length 32 --mock-data --vocab-size 128 --micro-batch-size 2 --global-batch-size 8 \
  --lr 1e-3 --train-iters 2 --override-opt_param-scheduler \
  --use-checkpoint-opt_param-scheduler 2>&1); then
  echo "both scheduler flags should be refused"; exit 1
fi
grep -qF -- "--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler exclude each other" \
  <<<"$err" || { echo "unclear error: $err"; exit 1; }
echo PASS
