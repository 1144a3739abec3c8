#!/usr/bin/env bash
# Sequence parallelism and selective recompute keep the run layout-invariant: one seed, global
# batch 8, dropout on, fp32, 4 layers. Against TP×PP×DP 1×1×1:
#  * GPT-2: 2×1×2 with --sequence-parallel, 2×2×1 with --sequence-parallel and full recompute,
#    2×1×2 with --sequence-parallel, the distributed optimizer and --recompute-activations
#    (selective) log the same lm loss and grad norm at each of 6 iterations (relative <= 1e-5);
#  * Llama options (RoPE, RMSNorm, SwiGLU, 2 KV groups, no biases, untied head): 2×2×1 with
#    --sequence-parallel, likewise;
#  * selective recompute at 1×1×1 logs the losses and grad norms of no recompute bit for bit;
#  * a checkpoint saved at 2×1×2 with --sequence-parallel resumes at 1×1×1 without it with the
#    uninterrupted run's next losses.
set -euo pipefail
: "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/tiny_gpt_run.bash"
TINY_GPT_FLAGS=(--train-iters 6 --eval-interval 1000 --eval-iters 0)

run t1p1d1 1 1 1
run t1p1d1_selective 1 1 1 --recompute-granularity selective
run t2p1d2_sp 4 2 1 --sequence-parallel --save "$WORK/ckpt_sp" --save-interval 3 \
  --exit-interval 3
grep -q "exiting program at iteration 3" "$WORK/t2p1d2_sp.log" ||
  { echo "FAIL: t2p1d2_sp no exit"; exit 1; }
run resumed_t1p1d1 1 1 1 --load "$WORK/ckpt_sp"
run t2p2d1_sp_full 4 2 2 --sequence-parallel --recompute-granularity full \
  --recompute-method uniform
run t2p1d2_sp_distopt_selective 4 2 1 --sequence-parallel --use-distributed-optimizer \
  --recompute-activations
run llama_t1p1d1 1 1 1 "${TINY_LLAMA[@]}"
run llama_t2p2d1_sp 4 2 2 "${TINY_LLAMA[@]}" --sequence-parallel

echo "== t1p1d1 vs selective recompute (bit for bit)"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/t1p1d1_selective.jsonl" --from 1 --to 6 --exact
echo "== t1p1d1 vs 2x1x2 with sequence parallelism (iterations 1-3, then it saves and exits)"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/t2p1d2_sp.jsonl" --from 1 --to 3 --rtol 1e-5
echo "== resumed at 1x1x1 without sequence parallelism from 2x1x2's checkpoint of iteration 3"
$CHECK "$WORK/t1p1d1.jsonl" "$WORK/resumed_t1p1d1.jsonl" --from 4 --to 6 --rtol 1e-5
for name in t2p2d1_sp_full t2p1d2_sp_distopt_selective; do
  echo "== t1p1d1 vs $name"
  $CHECK "$WORK/t1p1d1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== Llama options: 1x1x1 vs 2x2x1 with sequence parallelism"
$CHECK "$WORK/llama_t1p1d1.jsonl" "$WORK/llama_t2p2d1_sp.jsonl" --from 1 --to 6 --rtol 1e-5
# The checks must be able to fail: the loss has to move over the 6 iterations.
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/t1p1d1.jsonl" "$WORK/llama_t1p1d1.jsonl"
echo "sequence parallelism: OK"
