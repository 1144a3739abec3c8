#!/usr/bin/env bash
# TP=2 on one GPU: two processes share cuda:0 and talk through the MPI communicator, which
# stages device tensors through host memory (--distributed-backend mpi). Same seed, same
# global batch, dropout on, fp32: the 10 iterations must log the lm loss and grad norm of the
# TP=1 run on the same GPU (relative <= 1e-4), and so must TP=2 with sequence parallelism and
# selective recompute, and PP=2 (two stages sending device activations and gradients, 1F1B over
# 4 micro-batches). DP=2 on the same GPU with --overlap-grad-reduce
# (non-blocking reductions of device buckets staged through host copies), with and without the
# distributed optimizer, must log what it logs without the flag bit for bit; in bf16, DP=2 with
# the distributed optimizer logs the unsharded losses and its checkpoint resumes. Exits 77
# (CTest's skip) when the binary has no CUDA or no GPU is visible.
# GPU_TP_BACKEND=nccl runs the same scenario over NCCL instead, one GPU per rank (cuda:<local
# rank>): for a machine with several GPUs, and the emulated GPU (tests/simt), which has eight.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/gpu_or_skip.bash"
BACKEND=${GPU_TP_BACKEND:-mpi}
DEVICE=cuda:0
[[ $BACKEND == nccl ]] && DEVICE=cuda
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1

FLAGS=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32
       --micro-batch-size 8 --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2
       --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0 --seed 42
       --log-interval 1 --eval-interval 1000 --eval-iters 0 --device "$DEVICE")

# Skip unless this binary can train on a GPU here. One iteration: no warmup (it must be shorter
# than the decay).
"$MEGATRON_BINARY" pretrain-gpt "${FLAGS[@]}" --train-iters 1 --lr-warmup-iters 0 \
  --distributed-backend "$BACKEND" > "$WORK/probe.log" 2>&1 ||
  gpu_or_skip "$WORK/probe.log" "the GPU probe run failed"

run() {  # run NAME NP TP [FLAGS...]
  local name=$1 np=$2 tp=$3
  shift 3
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt "${FLAGS[@]}" --train-iters 10 \
    --tensor-model-parallel-size "$tp" --distributed-backend "$BACKEND" \
    --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}

run tp1 1 1
run tp2 2 2
grep -q "training on cuda:0" "$WORK/tp2.log" || { cat "$WORK/tp2.log"; echo "FAIL: not on the GPU"; exit 1; }

echo "== TP=1 vs TP=2 on one GPU"
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/tp1.jsonl" "$WORK/tp2.jsonl" \
  --from 1 --to 10 --rtol 1e-4
run tp2_sp 2 2 --sequence-parallel --recompute-activations
echo "== TP=1 vs TP=2 with sequence parallelism and selective recompute"
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/tp1.jsonl" "$WORK/tp2_sp.jsonl" \
  --from 1 --to 10 --rtol 1e-4
run pp2 2 1 --pipeline-model-parallel-size 2 --micro-batch-size 2
echo "== TP=1 vs PP=2 (4 micro-batches, 1F1B: device tensors sent between stages)"
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/tp1.jsonl" "$WORK/pp2.jsonl" \
  --from 1 --to 10 --rtol 1e-4
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 10 "$WORK/tp1.jsonl"
DP2=(--micro-batch-size 4 --ddp-bucket-size 10000)
for optimizer in "" --use-distributed-optimizer; do
  run dp2 2 1 "${DP2[@]}" $optimizer
  run dp2_overlap 2 1 "${DP2[@]}" $optimizer --overlap-grad-reduce
  echo "== DP=2 on one GPU ${optimizer:-(replicated optimizer)}: with and without --overlap-grad-reduce"
  node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/dp2.jsonl" \
    "$WORK/dp2_overlap.jsonl" --from 1 --to 10 --exact
done
# bf16 parameters (bf16 store, fp32 master in AdamW): the distributed optimizer's shards of the
# master give the unsharded run's losses, and its checkpoint (fp32 master shards) resumes
# unsharded with the uninterrupted run's next losses.
run bf16_dp2 2 1 "${DP2[@]}" --bf16
run bf16_dp2_sharded 2 1 "${DP2[@]}" --bf16 --use-distributed-optimizer \
  --save "$WORK/bf16_ckpt" --save-interval 5 --exit-interval 5
run bf16_dp2_resumed 2 1 "${DP2[@]}" --bf16 --load "$WORK/bf16_ckpt"
echo "== bf16 on one GPU: DP=2 sharded vs unsharded, and resumed from the sharded checkpoint"
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/bf16_dp2.jsonl" \
  "$WORK/bf16_dp2_sharded.jsonl" --from 1 --to 5 --rtol 1e-5
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/bf16_dp2.jsonl" \
  "$WORK/bf16_dp2_resumed.jsonl" --from 6 --to 10 --rtol 1e-5
echo "TP=2 on one GPU: OK"
