#!/usr/bin/env bash
# --expert-tensor-parallel-size other than the TP size (docs/moe.md): the same mixture-of-experts
# training (dropout on, aux loss and z-loss on, the first layer dense) gives the same lm loss,
# grad norm, load-balancing loss and z-loss (relative <= 1e-5, 6 iterations) at TP 1 (one
# process), TP 2 (the experts split like the dense MLP), TP 2 ETP 1 EP 2 (each expert whole on
# one rank, the rows moved over tp_ep), TP 2 ETP 1 without EP, TP 2 ETP 1 EP 2 with sequence
# parallelism and DP 2, TP 1 ETP 2 (the experts split over data-parallel ranks) and TP 2 ETP 1
# DP 2 with --use-distributed-optimizer (the dense state sharded over DP 2, the experts' over
# their expert data-parallel group of 4; rank 0 holds ceil(dense / 2) and ceil(experts / 4) of
# them), under mpirun -np 4. Checkpoints: a TP 2 ETP 1 EP 2 save resumes at the same layout bit for bit and,
# resharded, at TP 2 (ETP 2) and TP 1 to the losses of an uninterrupted run; a TP 2 (ETP 2) save
# resumes at TP 2 ETP 1 EP 2; a TP 2 ETP 1 DP 2 save with the distributed optimizer resumes at
# its layout bit for bit and at TP 1 and TP 2 ETP 1 EP 2 (sharded) to the uninterrupted losses. Then the refusal of an expert width ETP does not divide.
set -euo pipefail
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2
  --moe-z-loss-coeff 1e-3 --moe-layer-freq '([0]+[1]*3)' --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall)
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"

run tp1 1 1 1 "${MOE[@]}"
run tp2 2 2 1 "${MOE[@]}"
run tp2_etp1_ep2 2 2 1 --expert-tensor-parallel-size 1 --expert-model-parallel-size 2 "${MOE[@]}"
run tp2_etp1 2 2 1 --expert-tensor-parallel-size 1 "${MOE[@]}"
run tp2_sp_etp1_ep2_dp2 4 2 1 --sequence-parallel --expert-tensor-parallel-size 1 \
  --expert-model-parallel-size 2 "${MOE[@]}"
run tp1_etp2 2 1 1 --expert-tensor-parallel-size 2 "${MOE[@]}"
run tp2_etp1_distopt 4 2 1 --expert-tensor-parallel-size 1 --use-distributed-optimizer "${MOE[@]}"
shards=$(grep -o "distributed optimizer state on rank 0: .*" "$WORK/tp2_etp1_distopt.log")
read -r dense_mine dense_all expert_mine expert_all < <(
  echo "$shards" | sed -E 's/.*: ([0-9]+) of ([0-9]+) dense.*, ([0-9]+) of ([0-9]+) expert.*/\1 \2 \3 \4/')
echo "rank 0: $shards"
((dense_mine == (dense_all + 1) / 2 && expert_mine == (expert_all + 3) / 4 && expert_all > 0)) \
  || { echo "FAIL: rank 0's optimizer state is not its dense / 2 and expert / 4 shards"; exit 1; }
grep -q "load_balancing_loss: .* | z_loss: " "$WORK/tp2_etp1_ep2.log" \
  || { cat "$WORK/tp2_etp1_ep2.log"; echo "FAIL: the MoE losses are not logged"; exit 1; }
for name in tp2 tp2_etp1_ep2 tp2_etp1 tp2_sp_etp1_ep2_dp2 tp1_etp2 tp2_etp1_distopt; do
  echo "== tp1 vs $name"
  $CHECK "$WORK/tp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
# The flag took effect: rank 0 holds its experts whole at ETP 1 (more parameters than at TP 2)
# and half of each at ETP 2 (fewer than at TP 1).
params() { grep -o "model parallel rank (0, 0): [0-9]*" "$WORK/$1.log" | grep -o "[0-9]*$"; }
(($(params tp2_etp1) > $(params tp2) && $(params tp1_etp2) < $(params tp1))) \
  || { echo "FAIL: the experts are not split over the expert tensor-parallel group"; exit 1; }

echo "== checkpoints across expert tensor-parallel sizes"
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0)
ETP1=(--expert-tensor-parallel-size 1 --expert-model-parallel-size 2)
run whole 1 1 1 "${MOE[@]}"
run whole_etp1 2 2 1 "${ETP1[@]}" "${MOE[@]}"
run first_etp1 2 2 1 "${ETP1[@]}" "${MOE[@]}" --exit-interval 6 --save "$WORK/ckpt_etp1" \
  --save-interval 6
run first_tp2 2 2 1 "${MOE[@]}" --exit-interval 6 --save "$WORK/ckpt_tp2" --save-interval 6
run resumed_etp1 2 2 1 "${ETP1[@]}" "${MOE[@]}" --load "$WORK/ckpt_etp1"
$CHECK "$WORK/whole_etp1.jsonl" "$WORK/resumed_etp1.jsonl" --from 7 --to 8 --exact
run resumed_tp2_from_etp1 2 2 1 "${MOE[@]}" --load "$WORK/ckpt_etp1"
run resumed_tp1_from_etp1 1 1 1 "${MOE[@]}" --load "$WORK/ckpt_etp1"
run resumed_etp1_from_tp2 2 2 1 "${ETP1[@]}" "${MOE[@]}" --load "$WORK/ckpt_tp2"
DISTOPT=(--expert-tensor-parallel-size 1 --use-distributed-optimizer)
run whole_etp1_distopt 4 2 1 "${DISTOPT[@]}" "${MOE[@]}"
run first_etp1_distopt 4 2 1 "${DISTOPT[@]}" "${MOE[@]}" --exit-interval 6 \
  --save "$WORK/ckpt_etp1_distopt" --save-interval 6
run resumed_etp1_distopt 4 2 1 "${DISTOPT[@]}" "${MOE[@]}" --load "$WORK/ckpt_etp1_distopt"
$CHECK "$WORK/whole_etp1_distopt.jsonl" "$WORK/resumed_etp1_distopt.jsonl" --from 7 --to 8 --exact
run resumed_tp1_from_etp1_distopt 1 1 1 "${MOE[@]}" --load "$WORK/ckpt_etp1_distopt"
run resumed_etp1_ep2_from_etp1_distopt 4 2 1 "${DISTOPT[@]}" --expert-model-parallel-size 2 \
  "${MOE[@]}" --load "$WORK/ckpt_etp1_distopt"
for name in resumed_tp2_from_etp1 resumed_tp1_from_etp1 resumed_etp1_from_tp2 \
  resumed_tp1_from_etp1_distopt resumed_etp1_ep2_from_etp1_distopt; do
  echo "== whole vs $name"
  $CHECK "$WORK/whole.jsonl" "$WORK/$name.jsonl" --from 7 --to 8 --rtol 1e-5
done

# A width --expert-tensor-parallel-size does not divide stops before training.
if timeout 120 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
  --seq-length 32 --max-position-embeddings 32 --mock-data --vocab-size 128 \
  --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --train-iters 1 --num-experts 4 \
  --moe-ffn-hidden-size 45 --expert-tensor-parallel-size 2 > "$WORK/uneven.log" 2>&1; then
  cat "$WORK/uneven.log"; echo "FAIL: an expert width of 45 at ETP 2 was not refused"; exit 1
fi
grep -qF "is not divisible by --expert-tensor-parallel-size 2" "$WORK/uneven.log" \
  || { cat "$WORK/uneven.log"; echo "FAIL: no sentence naming the flag"; exit 1; }
echo "expert tensor parallelism across layouts: OK"
