#!/usr/bin/env bash
# A Mixtral-style mixture-of-experts layer (8 SwiGLU experts of width 3584, top-2, hidden 1024,
# 4096 tokens), megatron-cpp beside plain PyTorch (issue 42), interleaved.
#
# One training step of the layer (forward with routing, backward of the input and every weight):
#   megatron bench --mode moe          (grouped GEMM over the experts' token groups)
#   tools/reference/bench_pytorch_moe_layer.py   (HF's MixtralSparseMoeBlock: a loop over experts)
# on the same number of threads, alternating which runs first each round; then megatron alone
# at EP 2 (`mpirun -np 2`, each rank half the threads and its own 4096 tokens), which reports
# the step's exposed all-to-all time. megatron's lines also give its grouped GEMM's GFLOP/s
# against one dense GEMM of the same FLOPs in the same process.
#
#   bench/moe_layer.sh [build-dir]        (default: build)
#   env: THREADS=2 ROUNDS=1 ITERS=3 DTYPES="fp32 bf16" PYTHON=/usr/bin/python3 EP2=1
#        TOKENS=4096 H=1024 FFN=3584 E=8 K=2 (the shape; smaller ones for a quick check)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
THREADS=${THREADS:-2} ROUNDS=${ROUNDS:-1} ITERS=${ITERS:-3} EP2=${EP2:-1}
BENCH_NAME=moe_layer
source "$ROOT/bench/pytorch_side.bash"  # PYTHON, DTYPES
TOKENS=${TOKENS:-4096} H=${H:-1024} FFN=${FFN:-3584} E=${E:-8} K=${K:-2}
export OMP_NUM_THREADS=$THREADS

dtype_flag() { [[ $1 == bf16 ]] && echo bf16 || echo f32; }
ours_line() { # $1 = fp32 | bf16
  "$BUILD/megatron" bench --mode moe --tokens $TOKENS --hidden-size $H \
    --moe-ffn-hidden-size $FFN --num-experts $E --moe-router-topk $K --repeats "$ITERS" \
    --dtypes "$(dtype_flag "$1")" 2>&1 | grep 'step time'
}
theirs() {
  "$PYTHON" "$ROOT/tools/reference/bench_pytorch_moe_layer.py" --tokens $TOKENS --hidden $H \
    --ffn $FFN --experts $E --topk $K --dtype "$1" --threads "$THREADS" --iters "$ITERS" 2>&1 |
    grep -o 'step time (ms): [0-9.]*' | sed 's/.*: //'
}
ms_of() { grep -o 'step time (ms): [0-9.]*' | sed 's/.*: //'; }

echo "MoE layer: $E experts top-$K, h $H, expert FFN $FFN (SwiGLU), $TOKENS tokens, $THREADS" \
  "threads, best of $ITERS steps, rounds $ROUNDS, dtypes: $DTYPES;" \
  "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
declare -A OURS THEIRS
for ((r = 1; r <= ROUNDS; ++r)); do
  for d in $DTYPES; do
    order=(ours theirs)
    ((r % 2 == 0)) && order=(theirs ours)
    for side in "${order[@]}"; do
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      if [[ $side == ours ]]; then
        line=$(ours_line "$d") || true
        echo "round $r $d megatron: $(sed 's/^ *//' <<<"$line") (load average before: $load)"
        ms=$(ms_of <<<"$line")
      else
        ms=$(theirs "$d") || true
        echo "round $r $d pytorch: $ms ms/step (load average before: $load)"
      fi
      [[ -n "$ms" ]] || { echo "$side $d: no step time (run it by hand to see why)" >&2; exit 1; }
      [[ $side == ours ]] && OURS[$d]+="$ms " || THEIRS[$d]+="$ms "
    done
  done
done
print_median_ratios
if ((EP2)); then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  half=$(((THREADS + 1) / 2))
  for d in $DTYPES; do
    echo "EP 2 ($half threads per rank, $TOKENS tokens per rank), $d:" \
      "$(OMP_NUM_THREADS=$half mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS "$BUILD/megatron" \
        bench --mode moe --tokens $TOKENS --hidden-size $H --moe-ffn-hidden-size $FFN \
        --num-experts $E --moe-router-topk $K --repeats "$ITERS" --dtypes "$(dtype_flag "$d")" \
        2>&1 | grep 'step time' | sed 's/^ *//')"
  done
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
