#!/usr/bin/env bash
# Layout invariance with pipeline parallelism: one seed, one global batch (8), dropout on, fp32,
# 4 layers — TP×PP×DP 1×1×1, 2×2×1, 1×4×1, 1×2×2, 1×2×1 interleaved (2 chunks of 1 layer per
# rank), 2×2×1 interleaved with full activation recompute, 1×2×1 with block recompute of each
# stage's first layer, 1×2×2 interleaved with --overlap-grad-reduce (small buckets) and 1×2×2
# with Megatron's other rank order (--use-tp-pp-dp-mapping: pipeline ranks before data-parallel
# ones, its two replicas' parameters checked for agreement every 2 iterations) must log the same lm loss and grad norm at each of 8 iterations (relative <= 1e-5), and
# so must validation. Checkpoints saved at PP > 1 resume at another layout with the next losses
# of the uninterrupted run: 1×4×1 → 2×2×1, and 1×2×2 → 1×1×1; so does 1×4×1's checkpoint after
# `megatron convert` rewrote it at TP 2 × PP 2 (resumed at 2×2×1).
set -euo pipefail
: "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/tiny_gpt_run.bash"
TINY_GPT_FLAGS=(--train-iters 8 --eval-interval 4 --eval-iters 1)

run t1p1d1 1 1 1
run t2p2d1 4 2 2
run t1p4d1 4 1 4 --save "$WORK/ckpt_p4" --save-interval 4 --exit-interval 4
run t1p2d2 4 1 2 --save "$WORK/ckpt_p2d2" --save-interval 4 --exit-interval 4
run t1p2d1_interleaved 2 1 2 --num-layers-per-virtual-pipeline-stage 1
run t2p2d1_interleaved_recompute 4 2 2 --num-layers-per-virtual-pipeline-stage 1 \
  --recompute-granularity full
run t1p2d1_block_recompute 2 1 2 --recompute-granularity full --recompute-method block \
  --recompute-num-layers 1
run t1p2d2_interleaved_overlap 4 1 2 --num-layers-per-virtual-pipeline-stage 1 \
  --overlap-grad-reduce --ddp-bucket-size 10000
run t1p2d2_tp_pp_dp 4 1 2 --use-tp-pp-dp-mapping --check-weight-hash-across-dp-replicas-interval 2
for name in t1p4d1 t1p2d2; do
  grep -q "exiting program at iteration 4" "$WORK/$name.log" || { echo "FAIL: $name no exit"; exit 1; }
done
run resumed_t2p2d1 4 2 2 --load "$WORK/ckpt_p4"
run resumed_t1p1d1 1 1 1 --load "$WORK/ckpt_p2d2"
"$MEGATRON_BINARY" convert --model-type gpt --load "$WORK/ckpt_p4" --save "$WORK/ckpt_converted" \
  --target-tensor-parallel-size 2 --target-pipeline-parallel-size 2 > "$WORK/convert.log" 2>&1 ||
  { cat "$WORK/convert.log"; echo "FAIL: convert"; exit 1; }
[[ -d "$WORK/ckpt_converted/iter_0000004/mp_rank_01_001" ]] || { echo "FAIL: no TP2 x PP2 layout"; exit 1; }
run converted_t2p2d1 4 2 2 --load "$WORK/ckpt_converted"

for name in t2p2d1 t1p2d1_interleaved t2p2d1_interleaved_recompute t1p2d1_block_recompute \
  t1p2d2_interleaved_overlap t1p2d2_tp_pp_dp; do
  echo "== t1p1d1 vs $name"
  $CHECK "$WORK/t1p1d1.jsonl" "$WORK/$name.jsonl" --from 1 --to 8 --rtol 1e-5
done
for name in t1p4d1 t1p2d2; do
  echo "== t1p1d1 vs $name (iterations 1-4, then it saves and exits)"
  $CHECK "$WORK/t1p1d1.jsonl" "$WORK/$name.jsonl" --from 1 --to 4 --rtol 1e-5
done
echo "== resumed at 2x2x1 from 1x4x1's checkpoint of iteration 4"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/resumed_t2p2d1.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== resumed at 1x1x1 from 1x2x2's checkpoint of iteration 4"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/resumed_t1p1d1.jsonl" --from 5 --to 8 --rtol 1e-5
echo "== resumed at 2x2x1 from 1x4x1's checkpoint converted to TP 2 x PP 2"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/converted_t2p2d1.jsonl" --from 5 --to 8 --rtol 1e-5
# Validation losses agree too, matched by iteration and order (the runs that exit at 4 validate
# there; at the last iteration the interval's validation is followed by the final one, which
# scores the next batches of the validation set).
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_validation.js" "$WORK/t1p1d1.jsonl" \
     "$WORK/t2p2d1.jsonl" "$WORK/t1p4d1.jsonl" "$WORK/t1p2d2.jsonl" "$WORK/t1p2d1_interleaved.jsonl" \
     "$WORK/resumed_t2p2d1.jsonl" "$WORK/resumed_t1p1d1.jsonl"
# The check must be able to fail: the loss has to move over the 8 iterations.
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 8 "$WORK/t1p1d1.jsonl"
echo "pipeline layout invariance: OK"
