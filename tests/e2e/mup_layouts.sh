#!/usr/bin/env bash
# muP (--use-mup, docs/training.md): a tiny GPT at width 64 on a base width of 32 (width
# multiplier 2: hidden matrices initialised at σ/√2 and stepped at lr/2 with Adam eps/2, the
# attention scale 1/d, the logits × 1/2) with --mup-embedding-mult 2 trains to the same lm loss
# and grad norm (relative <= 1e-5, 6 iterations, dropout on) at TP 1, TP 2, TP 4, TP 2 with
# sequence parallelism, PP 2 (embedding and LM head on different stages), TP 2 x PP 2 and with
# the distributed optimizer over DP 2 (the LR groups split across DP shards). Without --use-mup
# the losses differ (the flag is seen), and the loss decreases. The model and one optimizer step
# run against PyTorch in tests/unit/model_mup_pytorch_golden_test.cpp.
set -euo pipefail
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
MUP=(--use-mup --mup-base-hidden-size 32 --mup-embedding-mult 2)
source "$(dirname "$0")/tiny_gpt_run.bash"

run tp1 1 1 1 "${MUP[@]}"
run tp2 2 2 1 "${MUP[@]}"
run tp4 4 4 1 "${MUP[@]}"
run tp2_sp 2 2 1 --sequence-parallel "${MUP[@]}"
run pp2 2 1 2 "${MUP[@]}"
run tp2_pp2 4 2 2 "${MUP[@]}"
run dp2_distopt 2 1 1 --use-distributed-optimizer "${MUP[@]}"
run tp1_standard 1 1 1
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/tp1.jsonl"
for name in tp2 tp4 tp2_sp pp2 tp2_pp2 dp2_distopt; do
  echo "== tp1 vs $name"
  $CHECK "$WORK/tp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== without --use-mup the training differs"
if $CHECK "$WORK/tp1.jsonl" "$WORK/tp1_standard.jsonl" --from 1 --to 6 --rtol 1e-5 \
  > "$WORK/standard.log" 2>&1; then
  echo "FAIL: --use-mup changed nothing"; exit 1
fi
echo "muP across layouts: OK"
