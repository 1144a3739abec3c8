#!/usr/bin/env bash
# GPT-2 124M training step on the CPU, megatron-cpp beside PyTorch (issue 17), interleaved.
#
# One training step (forward, backward, AdamW; dropout 0.1; micro-batch 8, sequence 128, 12
# layers, h 768, 12 heads, vocabulary 50257 padded to 50304) of
#   megatron bench --mode step (mock data)  and  tools/reference/bench_pytorch_gpt.py --device cpu
# on the same number of threads, alternating which runs first each round. fp32 always; bf16
# (megatron --bf16 beside PyTorch's bf16 autocast) when /proc/cpuinfo shows avx512_bf16 or
# amx_bf16. Prints each run's ms/step with the load average before it, then per dtype the median
# ms/step of each side and the ratio PyTorch / megatron (> 1: megatron faster).
#
#   bench/compare_pytorch.sh [--isa avx2] [build-dir]        (default: build)
#   env: THREADS=2 ROUNDS=1 WARMUP=2 ITERS=2 DTYPES="fp32 bf16" PYTHON=/usr/bin/python3
#
# --isa avx2: an AVX2 proxy (e.g. of a Zen 3 target) on an AVX-512 machine, fp32 only. Both
# sides' libraries are held to AVX2 kernels (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA=AVX2,
# OPENBLAS_CORETYPE=Haswell, PyTorch's ATEN_CPU_CAPABILITY=avx2), and build-dir must be a build
# configured for an AVX2 CPU (cmake -DMEGATRON_MARCH=znver3 or x86-64-v3), so that our own
# kernels have no AVX-512 either. Same instructions, not the same CPU: caches, clocks and
# per-instruction costs stay this machine's.
# WARMUP >= 2: megatron's activation arena grows during iteration 1 and is merged into one block
# at iteration 2, whose pages are first touched then (~130k page faults); from iteration 3 on a
# step allocates nothing. With WARMUP=1 that first touch lands in the timed window.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ISA=native
if [[ ${1:-} == --isa ]]; then
  [[ ${2:-} == avx2 ]] || { echo "--isa takes avx2 (got '${2:-}')" >&2; exit 2; }
  ISA=avx2
  shift 2
fi
BUILD=${1:-$ROOT/build}
if [[ $ISA == avx2 ]]; then
  march=$(sed -n 's/^MEGATRON_MARCH:STRING=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
  case $march in
    "" | native | *avx512* | *rapids* | skylake-avx512 | icelake* | cascadelake | cooperlake | \
      tigerlake | znver4 | znver5 | x86-64-v4)
      echo "--isa avx2 needs a build for an AVX2 CPU; $BUILD has MEGATRON_MARCH='$march'." \
        "Configure one with: cmake -S . -B build-avx2 -G Ninja -DCMAKE_BUILD_TYPE=Release" \
        "-DMEGATRON_MARCH=znver3" >&2
      exit 2
      ;;
  esac
  export ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell
  export ATEN_CPU_CAPABILITY=avx2
  DTYPES=fp32
fi
THREADS=${THREADS:-2} ROUNDS=${ROUNDS:-1} WARMUP=${WARMUP:-2} ITERS=${ITERS:-2}
BENCH_NAME=compare_pytorch
source "$ROOT/bench/pytorch_side.bash"  # PYTHON, DTYPES
L=12 H=768 HEADS=12 S=128 MB=8
export OMP_NUM_THREADS=$THREADS

ours() {  # $1 = fp32 | bf16
  local flag=()
  [[ $1 == bf16 ]] && flag=(--bf16)
  "$BUILD/megatron" bench --mode step --num-layers $L --hidden-size $H \
    --num-attention-heads $HEADS --seq-length $S --max-position-embeddings 1024 \
    --micro-batch-size $MB --global-batch-size $MB --warmup-iters "$WARMUP" \
    --timed-iters "$ITERS" "${flag[@]}" 2>&1 | grep -o 'step time (ms): [0-9.]*' | sed 's/.*: //'
}
theirs() {
  "$PYTHON" "$ROOT/tools/reference/bench_pytorch_gpt.py" --device cpu --dtype "$1" \
    --threads "$THREADS" --model "$L,$H,$HEADS,$S,$MB" --warmup "$WARMUP" --iters "$ITERS" 2>&1 |
    grep -o 'step time (ms): [0-9.]*' | sed 's/.*: //'
}

echo "GPT-2 124M, micro-batch $MB, seq $S, $THREADS threads, warmup $WARMUP, timed $ITERS," \
  "rounds $ROUNDS, dtypes: $DTYPES, isa: $ISA; $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
declare -A OURS THEIRS
for ((r = 1; r <= ROUNDS; ++r)); do
  for d in $DTYPES; do
    order=(ours theirs)
    ((r % 2 == 0)) && order=(theirs ours)
    for side in "${order[@]}"; do
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      ms=$($side "$d") || true  # an empty result is reported just below
      [[ -n "$ms" ]] || { echo "$side $d: no step time (run it by hand to see why)" >&2; exit 1; }
      echo "round $r $d $side: $ms ms/step (load average before: $load)"
      [[ $side == ours ]] && OURS[$d]+="$ms " || THEIRS[$d]+="$ms "
    done
  done
done
print_median_ratios
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
