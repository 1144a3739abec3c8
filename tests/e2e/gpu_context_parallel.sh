#!/usr/bin/env bash
# Context parallelism on the GPU (docs/parallelism.md): the ring attention's fused kernels and
# log-sum-exp merges in CUDA, its K/V and dK/dV passed between device buffers. Same seed, same
# global batch, dropout on, fp32: CP 2 over MPI on one GPU (two processes share cuda:0, device
# tensors staged through host memory) with --cp-comm-type p2p, all_gather and a2a, and over
# NCCL (one GPU per rank: a machine with 4 GPUs, or the emulated GPU of tests/simt, which has
# eight) TP 2 × CP 2 with sequence parallelism and CP 4 with a2a+p2p (2 × 2), must log the lm loss and grad norm of CP 1 on the GPU (relative <= 1e-4) at each of 6
# iterations. Exits 77 (CTest's skip) when the binary has no CUDA or no GPU is visible. The NCCL
# run needs 4 GPUs: it runs where nvidia-smi lists 4 or more, or with GPU_CP_BACKEND=nccl (the
# emulated GPU's registration, tests/simt/CMakeLists.txt).
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/gpu_or_skip.bash"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"

FLAGS=(pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32
       --micro-batch-size 4 --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2
       --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0 --seed 42
       --use-flash-attn --log-interval 1 --eval-interval 1000 --eval-iters 0 --train-iters 6)

"$MEGATRON_BINARY" "${FLAGS[@]}" --device cuda:0 --metrics-file "$WORK/cp1.jsonl" \
  > "$WORK/cp1.log" 2>&1 || gpu_or_skip "$WORK/cp1.log" "CP 1 on the GPU"
grep -q "training on cuda:0" "$WORK/cp1.log" || { cat "$WORK/cp1.log"; echo "FAIL: not on the GPU"; exit 1; }

run() {  # run NAME NP DEVICE BACKEND [FLAGS...]
  local name=$1 np=$2 device=$3 backend=$4
  shift 4
  timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" "${FLAGS[@]}" --device "$device" --distributed-backend "$backend" \
    --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
  echo "== CP 1 vs $name"
  $CHECK "$WORK/cp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-4
}

run cp2_mpi 2 cuda:0 mpi --context-parallel-size 2
run cp2_all_gather_mpi 2 cuda:0 mpi --context-parallel-size 2 --cp-comm-type all_gather
run cp2_a2a_mpi 2 cuda:0 mpi --context-parallel-size 2 --cp-comm-type a2a
gpus=$(nvidia-smi -L 2> /dev/null | grep -c GPU || true)
if [[ "${GPU_CP_BACKEND:-}" == nccl || "${gpus:-0}" -ge 4 ]]; then
  run tp2_cp2_sp_nccl 4 cuda nccl --context-parallel-size 2 --tensor-model-parallel-size 2 \
    --sequence-parallel
  run cp4_a2a_p2p_nccl 4 cuda nccl --context-parallel-size 4 --cp-comm-type a2a+p2p \
    --hierarchical-context-parallel-sizes 2 2
else
  echo "(fewer than 4 GPUs: no NCCL run)"
fi
echo "gpu context parallel: OK"
