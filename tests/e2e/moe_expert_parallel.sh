#!/usr/bin/env bash
# Expert parallelism (docs/moe.md): the same mixture-of-experts training (dropout on, aux loss
# and z-loss on, the first layer dense) gives the same lm loss, grad norm, load-balancing loss
# and z-loss (relative <= 1e-5, 6 iterations) at EP 1 (one process), EP 2 (the experts of two
# data-parallel ranks), EP 4, EP 2 x DP 2, EP 2 x TP 2 with sequence parallelism and EP 2 x PP 2,
# under mpirun -np 4; Sinkhorn-balanced routing with a gated shared expert at EP 2 as at EP 1.
# A checkpoint saved at EP 2 resumes bit for bit at EP 2 and, resharded,
# at EP 1 and EP 4 to the losses of an uninterrupted run; a checkpoint saved at EP 1 resumes at
# EP 4. The same EP 2 run saving with --async-save (the experts gathered at the step boundary,
# written in the background) writes the synchronous save's tensors byte for byte, and resumes at
# EP 2 and EP 1 bit for bit to the losses of the resumes of the synchronous save's checkpoint.
# --use-distributed-optimizer shards the dense parameters' optimizer state over dp × cp and the
# experts' over the expert data-parallel group (edp): at EP 2 × DP 4 (edp 2), EP 4 (edp 1),
# EP 2 × TP 2 with sequence parallelism and EP 2 × DP 4 with --overlap-grad-reduce in small
# buckets the losses, grad norms and MoE losses are EP 1's (relative <= 1e-5) and EP 2's without
# it; rank 0's state is ceil(dense / 4) dense and ceil(local expert elements / 2) expert
# elements at EP 2 × DP 4. With --fp16 (the f16 overflow check on both shards: the same skipped
# iterations and loss scales) and --bf16 (the fp32 master weights sharded per part) at EP 2 ×
# DP 4 the sharded run logs the unsharded run's metrics (relative <= 1e-5, as
# distributed_optimizer.sh argues; --log-params-norm too, from the master shards) and passes the
# replica check at every step. (The zero counts are not compared here: the two DP sums add in
# other orders, and an exact cancellation in one of them moves a count by one; the count over
# the shards is checked exactly in tests/dist/optim_grad_reduction_test.cpp.) Its checkpoint (the state gathered whole for the save) resumes at
# EP 2 × DP 4 sharded bit for bit, and resharded at EP 4 sharded and EP 1 unsharded to the
# losses of an uninterrupted run. Then the refusals: experts that do not split over EP and expert
# parallelism without experts, each a sentence naming the flags.
set -euo pipefail
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2
  --moe-z-loss-coeff 1e-3 --moe-layer-freq '([0]+[1]*3)' --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall)
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"

run ep1 1 1 1 "${MOE[@]}"
run ep2 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}"
run ep4 4 1 1 --expert-model-parallel-size 4 "${MOE[@]}"
run ep2_dp2 4 1 1 --expert-model-parallel-size 2 "${MOE[@]}"
run ep2_tp2_sp 4 2 1 --sequence-parallel --expert-model-parallel-size 2 "${MOE[@]}"
run ep2_pp2 4 1 2 --expert-model-parallel-size 2 "${MOE[@]}"
DISTOPT=(--use-distributed-optimizer)
run ep2_dp4_distopt 4 1 1 --expert-model-parallel-size 2 "${DISTOPT[@]}" "${MOE[@]}"
run ep4_distopt 4 1 1 --expert-model-parallel-size 4 "${DISTOPT[@]}" "${MOE[@]}"
run ep2_tp2_sp_distopt 4 2 1 --sequence-parallel --expert-model-parallel-size 2 \
  "${DISTOPT[@]}" "${MOE[@]}"
run ep2_dp4_distopt_overlap 4 1 1 --expert-model-parallel-size 2 "${DISTOPT[@]}" \
  --overlap-grad-reduce --ddp-bucket-size 4000 "${MOE[@]}"
grep -q "load_balancing_loss: .* | z_loss: " "$WORK/ep2.log" \
  || { cat "$WORK/ep2.log"; echo "FAIL: the MoE losses are not logged"; exit 1; }
for name in ep2 ep4 ep2_dp2 ep2_tp2_sp ep2_pp2 ep2_dp4_distopt ep4_distopt ep2_tp2_sp_distopt \
  ep2_dp4_distopt_overlap; do
  echo "== ep1 vs $name"
  $CHECK "$WORK/ep1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
for name in ep2_dp4_distopt ep2_dp4_distopt_overlap; do
  echo "== ep2_dp2 (unsharded) vs $name"
  $CHECK "$WORK/ep2_dp2.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
# Rank 0's optimizer state is a shard of each part: the dense elements over dp × cp 4, rank 0's
# expert elements (its 2 of the 4 experts) over edp 2.
shards=$(grep -o "distributed optimizer state on rank 0: .*" "$WORK/ep2_dp4_distopt.log")
read -r dense_mine dense_all expert_mine expert_all < <(
  echo "$shards" | sed -E 's/.*: ([0-9]+) of ([0-9]+) dense.*, ([0-9]+) of ([0-9]+) expert.*/\1 \2 \3 \4/')
params=$(grep -o "model parallel rank (0, 0): [0-9]*" "$WORK/ep2_dp4_distopt.log" | grep -o "[0-9]*$")
echo "rank 0: $shards (of $params parameters)"
((dense_all + expert_all == params && dense_mine == (dense_all + 3) / 4 &&
  expert_mine == (expert_all + 1) / 2 && expert_all > 0)) \
  || { echo "FAIL: rank 0's optimizer state is not its dense / 4 and expert / 2 shards"; exit 1; }
FP16=(--fp16 --initial-loss-scale 262144 --loss-scale-window 2)
for precision in fp16 bf16; do
  flags=(--bf16)
  [[ $precision == fp16 ]] && flags=("${FP16[@]}")
  flags+=(--log-params-norm --check-weight-hash-across-dp-replicas-interval 1)
  run ${precision}_ep2_dp4 4 1 1 --expert-model-parallel-size 2 "${flags[@]}" "${MOE[@]}"
  run ${precision}_ep2_dp4_distopt 4 1 1 --expert-model-parallel-size 2 "${flags[@]}" \
    "${DISTOPT[@]}" "${MOE[@]}"
  echo "== $precision: ep2_dp4 unsharded vs sharded"
  $CHECK "$WORK/${precision}_ep2_dp4.jsonl" "$WORK/${precision}_ep2_dp4_distopt.jsonl" --from 1 \
    --to 6 --rtol 1e-5
  node -e '
    const read = f => require("fs").readFileSync(f, "utf8").trim().split("\n").map(JSON.parse)
                        .filter(x => x.type === "train").map(x => x.params_norm);
    const [a, b] = [read(process.argv[1]), read(process.argv[2])];
    if (a.length !== 6 || a.some((v, i) => !(Math.abs(v - b[i]) <= 1e-5 * Math.abs(v)))) {
      console.error("FAIL: params norms differ:", a, b); process.exit(1);
    }' "$WORK/${precision}_ep2_dp4.jsonl" "$WORK/${precision}_ep2_dp4_distopt.jsonl"
done
node -e '
  const r = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse)
              .filter(x => x.type === "train");
  if (!r.some(x => x.skipped_iterations > 0) || !r.some(x => x.skipped_iterations === 0)) {
    console.error("FAIL: the fp16 reference run should both skip and take steps"); process.exit(1);
  }' "$WORK/fp16_ep2_dp4.jsonl"
SINKHORN=(--num-experts 4 --moe-router-topk 1 --moe-router-load-balancing-type sinkhorn
  --moe-ffn-hidden-size 48 --moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate)
run sinkhorn_ep1 1 1 1 "${SINKHORN[@]}"
run sinkhorn_ep2 2 1 1 --expert-model-parallel-size 2 "${SINKHORN[@]}"
echo "== sinkhorn: ep1 vs ep2"
$CHECK "$WORK/sinkhorn_ep1.jsonl" "$WORK/sinkhorn_ep2.jsonl" --from 1 --to 6 --rtol 1e-5

echo "== checkpoints across expert-parallel sizes"
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0)
run whole 1 1 1 "${MOE[@]}"
run whole_ep2 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}"
run first_ep2 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}" --exit-interval 6 \
  --save "$WORK/ckpt_ep2" --save-interval 6
run first_ep1 1 1 1 "${MOE[@]}" --exit-interval 6 --save "$WORK/ckpt_ep1" --save-interval 6
run resumed_ep2 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}" --load "$WORK/ckpt_ep2"
$CHECK "$WORK/whole_ep2.jsonl" "$WORK/resumed_ep2.jsonl" --from 7 --to 8 --exact
run resumed_ep1 1 1 1 "${MOE[@]}" --load "$WORK/ckpt_ep2"
run resumed_ep4 4 1 1 --expert-model-parallel-size 4 "${MOE[@]}" --load "$WORK/ckpt_ep2"
run resumed_ep4_from_ep1 4 1 1 --expert-model-parallel-size 4 "${MOE[@]}" --load "$WORK/ckpt_ep1"
for name in resumed_ep1 resumed_ep4 resumed_ep4_from_ep1; do
  echo "== whole vs $name"
  $CHECK "$WORK/whole.jsonl" "$WORK/$name.jsonl" --from 7 --to 8 --rtol 1e-5
done

echo "== --async-save at EP 2"
# Saves at 3 (committed at a later step boundary, while training goes on) and at 6.
run first_ep2_async 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}" --exit-interval 6 \
  --save "$WORK/ckpt_ep2_async" --save-interval 3 --async-save
for it in 3 6; do
  grep -q "started saving the checkpoint of iteration $it to .* in the background" \
    "$WORK/first_ep2_async.log" \
    || { cat "$WORK/first_ep2_async.log"; echo "FAIL: iteration $it not saved async"; exit 1; }
done
[[ $(cat "$WORK/ckpt_ep2_async/latest_checkpointed_iteration.txt") -eq 6 ]] \
  || { echo "FAIL: the newest --async-save checkpoint is not iteration 6"; exit 1; }
# The tensor bytes of a safetensors file: after its header (8 bytes of length, then JSON), which
# holds the checksum of state.json, whose stored command line differs between the two runs.
tensor_bytes() { tail -c +$(($(od -An -t u8 -N 8 "$1" | tr -d ' ') + 9)) "$1"; }
for f in "$WORK"/ckpt_ep2/iter_0000006/*/*.safetensors; do
  g="$WORK/ckpt_ep2_async/${f#"$WORK/ckpt_ep2/"}"
  cmp <(tensor_bytes "$f") <(tensor_bytes "$g") \
    || { echo "FAIL: --async-save at EP 2 wrote other tensors than the synchronous save"; exit 1; }
done
run resumed_async_ep2 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}" \
  --load "$WORK/ckpt_ep2_async"
$CHECK "$WORK/resumed_ep2.jsonl" "$WORK/resumed_async_ep2.jsonl" --from 7 --to 8 --exact
run resumed_async_ep1 1 1 1 "${MOE[@]}" --load "$WORK/ckpt_ep2_async"
$CHECK "$WORK/resumed_ep1.jsonl" "$WORK/resumed_async_ep1.jsonl" --from 7 --to 8 --exact

echo "== the distributed optimizer's expert shards across checkpoints"
run whole_ep2_dp4_distopt 4 1 1 --expert-model-parallel-size 2 "${DISTOPT[@]}" "${MOE[@]}"
run first_ep2_dp4_distopt 4 1 1 --expert-model-parallel-size 2 "${DISTOPT[@]}" "${MOE[@]}" \
  --exit-interval 6 --save "$WORK/ckpt_ep2_distopt" --save-interval 6
run resumed_ep2_dp4_distopt 4 1 1 --expert-model-parallel-size 2 "${DISTOPT[@]}" "${MOE[@]}" \
  --load "$WORK/ckpt_ep2_distopt"
$CHECK "$WORK/whole_ep2_dp4_distopt.jsonl" "$WORK/resumed_ep2_dp4_distopt.jsonl" --from 7 --to 8 \
  --exact
run resumed_ep4_distopt 4 1 1 --expert-model-parallel-size 4 "${DISTOPT[@]}" "${MOE[@]}" \
  --load "$WORK/ckpt_ep2_distopt"
run resumed_ep1_from_distopt 1 1 1 "${MOE[@]}" --load "$WORK/ckpt_ep2_distopt"
run resumed_ep2_distopt_from_ep1 4 1 1 --expert-model-parallel-size 2 "${DISTOPT[@]}" \
  "${MOE[@]}" --load "$WORK/ckpt_ep1"
for name in resumed_ep4_distopt resumed_ep1_from_distopt resumed_ep2_distopt_from_ep1; do
  echo "== whole vs $name"
  $CHECK "$WORK/whole.jsonl" "$WORK/$name.jsonl" --from 7 --to 8 --rtol 1e-5
done

# Runs that must stop before training, with `expected` in their output.
refused() {
  local name=$1 np=$2 expected=$3
  shift 3
  if timeout 120 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    --seq-length 32 --max-position-embeddings 32 --mock-data --vocab-size 128 \
    --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --train-iters 1 "$@" \
    > "$WORK/$name.log" 2>&1; then
    cat "$WORK/$name.log"; echo "FAIL: $name was not refused"; exit 1
  fi
  grep -qF -- "$expected" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; echo "FAIL: $name: no '$expected'"; exit 1; }
}
refused uneven 4 "--num-experts 6 is not divisible by --expert-model-parallel-size 4" \
  --num-experts 6 --expert-model-parallel-size 4
refused no_experts 2 "give --num-experts" --expert-model-parallel-size 2
echo "expert parallelism across layouts: OK"
