#!/usr/bin/env bash
# Mixture of experts with context parallelism (docs/moe.md, "Context parallelism"): each CP rank
# routes its own chunks of the sequences and the router's load-balancing statistics and z-loss
# sum are summed over the CP group, so the same model (dropout on, aux loss and z-loss on, the
# first layer dense) trains to the same lm loss, grad norm, load-balancing loss and z-loss
# (relative <= 1e-5, 6 iterations) at CP 1, CP 2, CP 4, CP 2 x TP 2 with sequence parallelism,
# CP 2 with full recompute (the router's reductions run again in the backward) and CP 2 x EP 2
# (the expert-parallel group is the CP pair: tokens of different chunks travel to their experts)
# under mpirun -np 4; the per-sequence loss (seq_aux_loss, whose sequences
# span the CP ranks) matches at CP 2 x EP 2. A CP 2 x
# EP 2 checkpoint resumes at CP 1 and a CP 1 one at CP 2 x TP 2, to the losses of an
# uninterrupted run.
#
# The per-token loss with the router losses (Megatron's scaling: the router losses' gradients
# times the micro-batch's token count, the sum then divided by the global batch's): with every
# token counted (no --eod-mask-loss) that is exactly the default run's scaling, 1 / (micro-
# batches x DP), so the per-token runs log the default run's losses at 4 micro-batches and CP 2;
# with --eod-mask-loss the token counts differ per micro-batch and the per-token runs match
# across layouts (DP 2, CP 2) and differ from the default.
set -euo pipefail
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2
  --moe-z-loss-coeff 1e-3 --moe-layer-freq '([0]+[1]*3)' --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall --use-flash-attn)
SEQ=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --use-flash-attn
  --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-2)
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"

same() {  # same REFERENCE CANDIDATE
  echo "== $1 vs $2"
  $CHECK "$WORK/$1.jsonl" "$WORK/$2.jsonl" --from 1 --to 6 --rtol 1e-5
}

run cp1 1 1 1 "${MOE[@]}"
run cp2 2 1 1 --context-parallel-size 2 "${MOE[@]}"
run cp4 4 1 1 --context-parallel-size 4 "${MOE[@]}"
run cp2_tp2_sp 4 2 1 --context-parallel-size 2 --sequence-parallel "${MOE[@]}"
run cp2_recompute 2 1 1 --context-parallel-size 2 --recompute-granularity full \
  --recompute-method uniform --recompute-num-layers 1 "${MOE[@]}"
run cp2_ep2 2 1 1 --context-parallel-size 2 --expert-model-parallel-size 2 "${MOE[@]}"
grep -q "load_balancing_loss: .* | z_loss: " "$WORK/cp2.log" \
  || { cat "$WORK/cp2.log"; echo "FAIL: the MoE losses are not logged"; exit 1; }
for name in cp2 cp4 cp2_tp2_sp cp2_recompute cp2_ep2; do same cp1 "$name"; done

run seq_cp1 1 1 1 "${SEQ[@]}"
run seq_cp2_ep2 2 1 1 --context-parallel-size 2 --expert-model-parallel-size 2 "${SEQ[@]}"
grep -q "seq_load_balancing_loss: " "$WORK/seq_cp2_ep2.log" \
  || { cat "$WORK/seq_cp2_ep2.log"; echo "FAIL: seq_load_balancing_loss is not logged"; exit 1; }
same seq_cp1 seq_cp2_ep2

echo "== checkpoints across context-parallel sizes"
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0)
run whole 1 1 1 "${MOE[@]}"
run first_cp2_ep2 2 1 1 --context-parallel-size 2 --expert-model-parallel-size 2 "${MOE[@]}" \
  --exit-interval 6 --save "$WORK/ckpt_cp2" --save-interval 6
run first_cp1 1 1 1 "${MOE[@]}" --exit-interval 6 --save "$WORK/ckpt_cp1" --save-interval 6
run resumed_cp1 1 1 1 "${MOE[@]}" --load "$WORK/ckpt_cp2"
run resumed_cp2_tp2 4 2 1 --context-parallel-size 2 --sequence-parallel "${MOE[@]}" \
  --load "$WORK/ckpt_cp1"
for name in resumed_cp1 resumed_cp2_tp2; do
  echo "== whole vs $name"
  $CHECK "$WORK/whole.jsonl" "$WORK/$name.jsonl" --from 7 --to 8 --rtol 1e-5
done

echo "== the per-token loss with the router losses"
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0 --tokenizer-type NullTokenizer)
PT=(--calculate-per-token-loss "${MOE[@]}")
run mean 1 1 1 "${MOE[@]}"
run pt_acc4 1 1 1 "${PT[@]}"
run pt_cp2 2 1 1 --context-parallel-size 2 "${PT[@]}"
for name in pt_acc4 pt_cp2; do same mean "$name"; done
TINY_GPT_FLAGS+=(--eod-mask-loss)
run eod_mean 1 1 1 "${MOE[@]}"
run eod_acc4 1 1 1 "${PT[@]}"
run eod_dp2 2 1 1 "${PT[@]}"
run eod_cp2 2 1 1 --context-parallel-size 2 "${PT[@]}"
for name in eod_dp2 eod_cp2; do same eod_acc4 "$name"; done
echo "== with --eod-mask-loss the per-token loss must differ from the default"
if $CHECK "$WORK/eod_mean.jsonl" "$WORK/eod_acc4.jsonl" --from 1 --to 1 --rtol 1e-5 \
  > "$WORK/differ.log" 2>&1; then
  cat "$WORK/differ.log"
  echo "FAIL: the default loss equals the per-token loss: the micro-batches' masks are equal"
  exit 1
fi
echo "mixture of experts with context parallelism: OK"
