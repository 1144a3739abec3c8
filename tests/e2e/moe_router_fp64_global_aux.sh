#!/usr/bin/env bash
# --moe-router-dtype fp64 with the balancing types as a Megatron list, seq_aux_loss and
# global_aux_loss (docs/moe.md), trains a tiny MoE GPT to the same lm loss, grad norm and
# router losses (relative <= 1e-5, 6 iterations) at TP 1, TP 2 with sequence parallelism and
# PP 2 (every TP rank routes the same tokens; each stage runs its micro-batches' forwards in
# order, so the running mean of the counts is the same); global_load_balancing_loss and
# seq_load_balancing_loss are logged; a recomputed MoE layer is refused with global_aux_loss.
# The router against PyTorch: tests/unit/model_moe_router_test.cpp and
# tests/dist/model_moe_router_global_aux_test.cpp.
set -euo pipefail
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-layer-freq '([0]+[1]*3)'
  --moe-router-dtype fp64 --moe-router-load-balancing-type seq_aux_loss global_aux_loss
  --moe-aux-loss-coeff 1e-2 1e-2 --moe-z-loss-coeff 1e-3)
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"

run tp1 1 1 1 "${MOE[@]}"
run tp2_sp 2 2 1 --sequence-parallel "${MOE[@]}"
run pp2 2 1 2 "${MOE[@]}"
grep -q "seq_load_balancing_loss: .* | global_load_balancing_loss: " "$WORK/tp1.log" \
  || { cat "$WORK/tp1.log"; echo "FAIL: the global load-balancing loss is not logged"; exit 1; }
for name in tp2_sp pp2; do
  echo "== tp1 vs $name"
  $CHECK "$WORK/tp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
if mpirun --oversubscribe --allow-run-as-root --bind-to none -np 1 "$MEGATRON_BINARY" \
  pretrain-gpt --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
  --max-position-embeddings 32 --mock-data --vocab-size 128 --micro-batch-size 2 \
  --global-batch-size 2 --lr 1e-3 --train-iters 1 --eval-iters 0 "${MOE[@]}" \
  --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
  > "$WORK/recompute.log" 2>&1; then
  cat "$WORK/recompute.log"; echo "FAIL: global_aux_loss with full recompute was accepted"; exit 1
fi
grep -q "global_aux_loss adds each micro-batch's counts" "$WORK/recompute.log" \
  || { cat "$WORK/recompute.log"; echo "FAIL: not the refusal expected"; exit 1; }
echo "PASS"
