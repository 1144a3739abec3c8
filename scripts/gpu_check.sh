#!/usr/bin/env bash
# One command for a machine with an NVIDIA GPU (docs/cuda.md, "Building on a GPU machine"):
#   1. configure + build megatron and gpu_tests with CUDA (Ninja, all cores, only those targets;
#      the bundle from scripts/gpu_bundle.sh stands in for missing Debian packages);
#   2. run the GPU tests (gpu_tests; dist_tests' collectives on CUDA tensors and the e2e GPU
#      scenarios that need no fetched data — TP/PP/DP on one GPU, generation — where mpirun and
#      node exist);
#   3. measure the bf16 GEMM ceiling (megatron bench --mode kernels, and PyTorch's matmul), and
#      the causal attention alone at the 1.3B model's shape (b 4, s 2048, 16 heads of 128):
#      megatron's fused attention against PyTorch's scaled_dot_product_attention; and the
#      machine file `megatron plan` reads (bench --mode machine --device cuda: machine_gpu.json);
#   4. `megatron bench --mode step` in bf16 for GPT-2 124M (s 1024), 350M (24 layers, h 1024,
#      16 heads, s 1024) and GPT 1.3B (24 layers, h 2048, 16 heads, s 2048), and the same models
#      in PyTorch (tools/reference/bench_pytorch_gpt.py) when python3 has torch, same tokens per
#      step; tokens/s, TFLOP/s (Megatron's formula), MFU against the best measured ceiling, and
#      the ratio megatron/PyTorch;
#   5. with what is left of the budget, the 1.3B step once more with --breakdown: GPU time per
#      kernel (events on the compute stream) against its FLOP and byte floors;
#   6. write $OUT/summary.md (with a table ready for bench/RESULTS.md, and the plan's tokens/s
#      from machine_gpu.json beside the measured steps), results.tsv and logs.
# Without a GPU it says so, builds, runs gpu_tests (which skip) and skips the measurements.
# Every stage runs under `timeout`, within one overall budget (GPU_CHECK_BUDGET, 470 s).
#
#   bash scripts/gpu_check.sh                   # OUT defaults to ./gpu_check_out
# Environment (all optional):
#   OUT                    where the summary and logs go
#   MEGATRON_GPU_BUILD_DIR build folder (build-gpu)
#   GPU_CHECK_CUDA         AUTO (CUDA when nvcc is found), ON, OFF
#   GPU_CHECK_MBS          micro-batch sizes for 124M,350M,1.3B (32,16,4); halved once on failure
#   GPU_CHECK_MODELS       which models, by name: 124M,350M,1.3B
#   GPU_CHECK_FLASH_MODELS models measured a second time with the fused attention
#                          (--use-flash-attn, kernels/cuda/flash_attention.cu): 1.3B; "" for none
#   GPU_CHECK_BUDGET       seconds for the whole script (470)
#   GPU_CHECK_SKIP_TESTS=1 skip step 2
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/gpu_check_out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
BUILD="${MEGATRON_GPU_BUILD_DIR:-$ROOT/build-gpu}"
BUDGET="${GPU_CHECK_BUDGET:-470}"
START=$(date +%s)
DEADLINE=$((START + BUDGET))
LOG="$OUT/gpu_check.log"
: > "$LOG"
: > "$OUT/stages.tsv"
exec > >(tee -a "$LOG") 2>&1

say() { echo "[gpu_check $(($(date +%s) - START))s] $*"; }
elapsed() { echo $(($(date +%s) - START)); }
FAILED=0

# stage NAME CAP LOGFILE CMD...: runs CMD under timeout (its cap, or what is left of the budget
# minus a reserve for the summary), appending its output to LOGFILE and to this script's log.
stage() {
  local name="$1" cap="$2" logfile="$3"
  shift 3
  local left=$((DEADLINE - $(date +%s) - 10))
  local limit=$((cap < left ? cap : left))
  if ((limit < 5)); then
    say "$name: SKIPPED (time budget spent)"
    printf '%s\tskipped (budget)\t0\n' "$name" >> "$OUT/stages.tsv"
    return 124
  fi
  say "$name (timeout ${limit}s)"
  local t0 rc
  t0=$(date +%s)
  { echo "=== $name: $*"; } >> "$logfile"
  timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$logfile"
  rc=${PIPESTATUS[0]}
  local took=$(($(date +%s) - t0)) status="ok"
  ((rc == 124 || rc == 137)) && status="TIMEOUT"
  ((rc != 0 && rc != 124 && rc != 137)) && status="FAILED (exit $rc)"
  say "$name: $status in ${took}s"
  printf '%s\t%s\t%s\n' "$name" "$status" "$took" >> "$OUT/stages.tsv"
  return "$rc"
}

# ---- 0. the machine ----------------------------------------------------------------------------
GPU_NAME=""
GPU_ARCH=""
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && [[ -n "$(nvidia-smi -L 2>/dev/null)" ]]; then
  GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  GPU_ARCH="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '. ')"
  DRIVER="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  say "GPU: $(nvidia-smi -L | head -1) (compute capability ${GPU_ARCH}, driver $DRIVER, $(nvidia-smi -L | wc -l) visible)"
else
  DRIVER="none"
  say "no NVIDIA GPU visible (nvidia-smi missing or lists none): building and running gpu_tests" \
      "(they skip themselves); the benchmarks need a GPU and are skipped"
fi

NVCC=""
for c in "${CUDACXX:-}" "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc; do
  [[ -n "$c" && -x "$c" ]] && { NVCC="$c"; break; }
done
if [[ -z "$NVCC" ]] && command -v python3 >/dev/null; then  # the NVIDIA wheels' compiler
  NVCC="$(python3 -c 'import glob, site, sysconfig
dirs = [sysconfig.get_paths()["purelib"]] + site.getsitepackages()
print(next(iter(sorted(p for d in dirs for p in glob.glob(d + "/nvidia/*/bin/nvcc"))), ""))' 2>/dev/null)"
fi
CUDA_MODE="${GPU_CHECK_CUDA:-AUTO}"
[[ "$CUDA_MODE" == AUTO ]] && CUDA_MODE=$([[ -n "$NVCC" ]] && echo ON || echo OFF)
say "nvcc: ${NVCC:-none} -> CUDA build $CUDA_MODE; cores: $(nproc); cmake: $(cmake --version | head -1)"

TORCH=""
if command -v python3 >/dev/null; then
  TORCH="$(timeout 90 python3 -c 'import torch; print(torch.__version__, "cuda" if torch.cuda.is_available() else "no-cuda")' 2>/dev/null | tail -1)"
fi
say "python3 torch: ${TORCH:-not importable}"

# ---- 1. the bundle (machines without Debian's -dev packages) ---------------------------------
BUNDLE="${MEGATRON_BUNDLE_DIR:-$ROOT/.gpu-bundle}"
if ls "$BUNDLE"/debs/*.deb >/dev/null 2>&1; then
  if [[ ! -f "$BUNDLE/root/.unpacked" || -n "$(find "$BUNDLE/debs" -newer "$BUNDLE/root/.unpacked" -name '*.deb' 2>/dev/null)" ]]; then
    stage bundle 60 "$OUT/build.log" bash "$ROOT/scripts/gpu_bundle.sh" unpack || FAILED=1
  else
    say "bundle: $BUNDLE/root already unpacked"
  fi
else
  say "bundle: none ($BUNDLE/debs); relying on installed packages"
fi

# ---- 2. configure + build ----------------------------------------------------------------------
GEN=(-G Ninja)
command -v ninja >/dev/null || GEN=(-G "Unix Makefiles")
CMAKE_ARGS=(-S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DMEGATRON_BENCH=OFF
            -DBUILD_TESTING=ON -DMEGATRON_CUDA="$CUDA_MODE" -DCMAKE_POLICY_VERSION_MINIMUM=3.5)
if [[ "$CUDA_MODE" == ON ]]; then
  CMAKE_ARGS+=(-DCMAKE_CUDA_COMPILER="$NVCC")
  # Only this GPU's architecture: half the device code to compile.
  [[ -n "$GPU_ARCH" ]] && CMAKE_ARGS+=(-DCMAKE_CUDA_ARCHITECTURES="$GPU_ARCH")
fi
# A bundled OpenMPI that cannot run here (e.g. an image with an older glibc than Debian 12's)
# would leave megatron unable to start: then build without MPI (single process) instead.
if [[ -x "$BUNDLE/root/usr/bin/orterun" ]] && ! command -v mpicxx >/dev/null; then
  if ! (eval "$(bash "$ROOT/scripts/gpu_bundle.sh" env)" && timeout 30 mpirun --version) >/dev/null 2>&1; then
    say "bundled OpenMPI does not run on this machine: building without MPI (no TP=2 test)"
    CMAKE_ARGS+=(-DMEGATRON_USE_MPI=OFF)
  fi
fi
BUILT=0
if stage configure 120 "$OUT/build.log" cmake "${CMAKE_ARGS[@]}"; then
  TARGETS=(megatron)
  cmake --build "$BUILD" --target help 2>/dev/null | grep -qw gpu_tests && TARGETS+=(gpu_tests)
  # dist_tests: the collectives on CUDA tensors (MPI through pinned host buffers, NCCL).
  cmake --build "$BUILD" --target help 2>/dev/null | grep -qw dist_tests && TARGETS+=(dist_tests)
  stage build 240 "$OUT/build.log" cmake --build "$BUILD" --parallel "$(nproc)" --target "${TARGETS[@]}" &&
    BUILT=1 || FAILED=1
else
  FAILED=1
fi
grep -E "^-- megatron:" "$OUT/build.log" | sort -u | sed 's/^/  /'

# What the build found (written by cmake/MegatronDependencies.cmake); with OpenMPI from the
# bundle, mpirun and the ranks need its environment.
MEGATRON_WITH_MPI=OFF
MEGATRON_MPI_FROM_BUNDLE=0
[[ -f "$BUILD/megatron_features.sh" ]] && source "$BUILD/megatron_features.sh"
if [[ "$MEGATRON_MPI_FROM_BUNDLE" == 1 ]]; then
  eval "$(bash "$ROOT/scripts/gpu_bundle.sh" env)"
  say "MPI: bundled OpenMPI ($(command -v mpirun))"
fi
HAS_MPI=0
[[ "$MEGATRON_WITH_MPI" == ON ]] && command -v mpirun >/dev/null && HAS_MPI=1
export PYTHONUNBUFFERED=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export MEGATRON_SOURCE_DIR="$ROOT" MEGATRON_BINARY="$BUILD/megatron"

# ---- 3. GPU tests ------------------------------------------------------------------------------
TESTS_SUMMARY="not run"
if ((BUILT)) && [[ "${GPU_CHECK_SKIP_TESTS:-0}" != 1 ]]; then
  GPU_TESTS="$BUILD/tests/gpu_tests"
  if [[ -x "$GPU_TESTS" ]]; then
    stage gpu_tests 180 "$OUT/tests.log" "$GPU_TESTS" --gtest_color=no || FAILED=1
    count() { grep -o "^\[  $1 *\] [0-9][0-9]* test" "$OUT/tests.log" | tail -1 | grep -o '[0-9][0-9]*'; }
    passed=$(count PASSED)
    skipped=$(count SKIPPED)
    failed=$(count FAILED)
    TESTS_SUMMARY="gpu_tests: ${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
  else
    TESTS_SUMMARY="gpu_tests: not built (no tests/gpu/*.cpp)"
  fi
  say "$TESTS_SUMMARY"
  # The MPI and NCCL collectives on CUDA tensors (distributed_communicator_test's Staged and Nccl cases,
  # which skip without a GPU): 2 ranks on this GPU for MPI's staged path, 1 rank for NCCL (it
  # refuses two ranks on one device).
  DIST_TESTS="$BUILD/tests/dist_tests"
  if [[ -n "$GPU_NAME" ]] && ((HAS_MPI)) && [[ -x "$DIST_TESTS" ]]; then
    if stage dist_tests_np2 150 "$OUT/tests.log" mpirun --oversubscribe --bind-to none -np 2 \
      "$DIST_TESTS" --gtest_color=no &&
      stage dist_tests_np1 90 "$OUT/tests.log" mpirun -np 1 "$DIST_TESTS" --gtest_color=no; then
      TESTS_SUMMARY+="; dist_tests (np 2, np 1) on the GPU: passed"
    else
      TESTS_SUMMARY+="; dist_tests on the GPU: FAILED (tests.log)"
      FAILED=1
    fi
  fi
  # The e2e GPU scenarios that need no fetched data: TP/PP/DP on one GPU, generation, and the
  # fused attention's warp-tile kernels inside bf16 training.
  for scenario in "gpu_tensor_parallel:TP=2, PP=2, DP=2 on one GPU" "gpu_generate:generation on the GPU" \
    "gpu_flash_attention:--use-flash-attn --bf16 training on the GPU"; do
    name=${scenario%%:*} what=${scenario#*:}
    E2E="$ROOT/tests/e2e/$name.sh"
    [[ -f "$E2E" ]] || continue
    if [[ -z "$GPU_NAME" ]]; then
      TESTS_SUMMARY+="; $what: skipped (no GPU)"
    elif ((!HAS_MPI)); then
      TESTS_SUMMARY+="; $what: skipped (no MPI in this build)"
    elif ! command -v node >/dev/null; then
      TESTS_SUMMARY+="; $what: skipped (no node for the comparisons)"
    elif stage "e2e_$name" 120 "$OUT/tests.log" bash "$E2E"; then
      TESTS_SUMMARY+="; $what: passed"
    else
      TESTS_SUMMARY+="; $what: FAILED"
      FAILED=1
    fi
  done
fi

# ---- 4. ceilings and whole steps ---------------------------------------------------------------
declare -A SPEC=([124M]="12 768 12 1024" [350M]="24 1024 16 1024" [1.3B]="24 2048 16 2048")
IFS=, read -r MBS_124M MBS_350M MBS_1P3B <<< "${GPU_CHECK_MBS:-32,16,4}"
declare -A MBS=([124M]="$MBS_124M" [350M]="$MBS_350M" [1.3B]="$MBS_1P3B")
# Steps: more for the small models, whose steps are short.
declare -A ITERS=([124M]="3 10" [350M]="3 10" [1.3B]="2 6")
IFS=, read -r -a MODELS <<< "${GPU_CHECK_MODELS:-1.3B,350M,124M}"
VOCAB_PADDED=50304  # 50257 padded to a multiple of 128 (TP = 1)
IFS=, read -r -a FLASH_MODELS <<< "${GPU_CHECK_FLASH_MODELS-1.3B}"
declare -A M_TOKS M_MBS M_SELF_MFU M_MAXALLOC P_TOKS P_MBS F_TOKS
CEIL_MEGATRON=""
CEIL_TORCH=""
CEIL_STEP=""
ATTN_MEGATRON=""
ATTN_TORCH=""
USE_TORCH=0
[[ "$TORCH" == *" cuda" ]] && USE_TORCH=1

# flops_per_token L h s: Megatron's 72·L·h²·(1 + s/(6h) + V/(12·L·h)), per token (B·s tokens).
flops_per_token() {
  awk -v L="$1" -v h="$2" -v s="$3" -v V="$VOCAB_PADDED" \
    'BEGIN { printf "%.6e", 72 * L * h * h * (1 + s / (6 * h) + V / (12 * L * h)) }'
}

if ((BUILT)) && [[ -n "$GPU_NAME" && "$CUDA_MODE" == ON ]]; then
  # megatron's own ceiling: cuBLASLt on an 8192^3 bf16 product (if this megatron's kernel bench
  # runs on the GPU).
  if stage ceiling_megatron 60 "$OUT/bench.log" "$BUILD/megatron" bench --mode kernels \
       --device cuda --dtype bf16 --ceiling-size 8192 --tokens 8192 --hidden-size 2048 \
       --ffn-hidden-size 8192 --seq-length 2048 --num-attention-heads 16 --min-time 0.5; then
    g=$(grep -o 'bf16 GEMM ceiling ([0-9]*^3): [0-9.]* GFLOP/s' "$OUT/bench.log" | tail -1 |
        sed 's/.*: \([0-9.]*\) GFLOP.*/\1/')
    [[ -n "$g" ]] && CEIL_MEGATRON=$(awk -v g="$g" 'BEGIN { printf "%.1f", g / 1000 }')
    a=$(grep -o 'fused attention bf16 .*forward+backward [0-9.]* GFLOP/s' "$OUT/bench.log" | tail -1)
    [[ -n "$a" ]] && ATTN_MEGATRON=$(sed 's/.*forward \([0-9.]*\) GFLOP.*forward+backward \([0-9.]*\) GFLOP.*/\1 \2/' <<< "$a" |
      awk '{ printf "%.1f %.1f", $1 / 1000, $2 / 1000 }')
  fi
  if ((USE_TORCH)); then
    stage ceiling_pytorch 90 "$OUT/bench.log" python3 "$ROOT/tools/reference/bench_pytorch_gpt.py" \
      --ceiling 8192 --attention 4,2048,16,128 &&
      CEIL_TORCH=$(grep -o 'pytorch bf16 GEMM ceiling ([0-9]*^3): [0-9.]*' "$OUT/bench.log" | tail -1 | sed 's/.*: //')
    a=$(grep -o 'pytorch attention .*forward TFLOP/s: [0-9.]* | forward+backward TFLOP/s: [0-9.]*' "$OUT/bench.log" | tail -1)
    [[ -n "$a" ]] && ATTN_TORCH=$(sed 's/.*forward TFLOP\/s: \([0-9.]*\) | forward+backward TFLOP\/s: \([0-9.]*\)/\1 \2/' <<< "$a")
  fi

  # The machine file `megatron plan` reads, measured on this GPU (docs/plan.md): the GEMM fit
  # against the datasheet's dense bf16 peak where the GPU is known, element-wise kernels, copy.
  PEAK=()
  case "$GPU_NAME" in
    *H100* | *H200* | *H800* | *GH200*) PEAK=(--peak-tflops bf16=989) ;;
    *A100* | *A800*) PEAK=(--peak-tflops bf16=312) ;;
  esac
  stage machine_file 120 "$OUT/machine.log" "$BUILD/megatron" bench --mode machine --device cuda \
    --dtype bf16 --min-time 0.05 "${PEAK[@]}" --name "${GPU_NAME:-GPU} (measured by gpu_check.sh)" \
    --output "$OUT/machine_gpu.json" || FAILED=1

  for model in "${MODELS[@]}"; do
    [[ -n "${SPEC[$model]:-}" ]] || { say "unknown model '$model' (124M, 350M, 1.3B)"; continue; }
    read -r L H A S <<< "${SPEC[$model]}"
    read -r WARM TIMED <<< "${ITERS[$model]}"
    mbs="${MBS[$model]}"
    for attempt in 1 2; do
      : > "$OUT/step.tmp"
      label="megatron_$model"
      ((attempt > 1)) && label+="_mbs$mbs"
      if stage "$label" 150 "$OUT/step.tmp" "$BUILD/megatron" bench --mode step --device cuda \
           --bf16 --num-layers "$L" --hidden-size "$H" --num-attention-heads "$A" --seq-length "$S" \
           --max-position-embeddings "$S" --micro-batch-size "$mbs" --global-batch-size "$mbs" \
           --warmup-iters "$WARM" --timed-iters "$TIMED"; then
        M_TOKS[$model]=$(grep -o 'tokens/s: [0-9.]*' "$OUT/step.tmp" | tail -1 | sed 's/.*: //')
        M_SELF_MFU[$model]=$(grep -o 'MFU: [0-9.]*%' "$OUT/step.tmp" | tail -1 | sed 's/MFU: //')
        M_MAXALLOC[$model]=$(grep -o 'max allocated: [0-9.]*' "$OUT/step.tmp" | tail -1 | sed 's/.*: //')
        CEIL_STEP=$(grep -o 'GEMM ceiling per process (TFLOP/s, bf16): [0-9.]*' "$OUT/step.tmp" | tail -1 | sed 's/.*: //')
        M_MBS[$model]=$mbs
        cat "$OUT/step.tmp" >> "$OUT/bench.log"
        break
      fi
      cat "$OUT/step.tmp" >> "$OUT/bench.log"
      # Out of device memory: one more try at half the micro-batch.
      ((attempt == 1 && mbs > 1)) && grep -qi -e "out of memory" -e "cudaMalloc" "$OUT/step.tmp" || break
      mbs=$((mbs / 2))
      say "megatron $model ran out of GPU memory at micro-batch ${MBS[$model]}: trying $mbs"
    done
    [[ -n "${M_TOKS[$model]:-}" ]] || FAILED=1
    # The same step with the fused attention, at the micro-batch that ran.
    if [[ -n "${M_TOKS[$model]:-}" && " ${FLASH_MODELS[*]} " == *" $model "* ]]; then
      : > "$OUT/step.tmp"
      if stage "megatron_${model}_flash" 150 "$OUT/step.tmp" "$BUILD/megatron" bench --mode step \
           --device cuda --bf16 --use-flash-attn --num-layers "$L" --hidden-size "$H" \
           --num-attention-heads "$A" --seq-length "$S" --max-position-embeddings "$S" \
           --micro-batch-size "${M_MBS[$model]}" --global-batch-size "${M_MBS[$model]}" \
           --warmup-iters "$WARM" --timed-iters "$TIMED"; then
        F_TOKS[$model]=$(grep -o 'tokens/s: [0-9.]*' "$OUT/step.tmp" | tail -1 | sed 's/.*: //')
      else
        FAILED=1
      fi
      cat "$OUT/step.tmp" >> "$OUT/bench.log"
    fi
    if ((USE_TORCH)); then
      pmbs="${M_MBS[$model]:-${MBS[$model]}}"
      : > "$OUT/step.tmp"
      stage "pytorch_$model" 120 "$OUT/step.tmp" python3 "$ROOT/tools/reference/bench_pytorch_gpt.py" \
        --model "$L,$H,$A,$S,$pmbs" --warmup "$WARM" --iters "$TIMED" || FAILED=1
      t=$(grep -o 'tokens/s: [0-9.]*' "$OUT/step.tmp" | tail -1 | sed 's/.*: //')
      [[ -n "$t" ]] && { P_TOKS[$model]=$t; P_MBS[$model]=$pmbs; }
      cat "$OUT/step.tmp" >> "$OUT/bench.log"
    fi
  done
  rm -f "$OUT/step.tmp"
  # Last, with what is left of the budget: where the 1.3B step's time goes, kernel by kernel
  # (GPU-timed by events on the compute stream), with the fused attention.
  if [[ -n "${M_TOKS[1.3B]:-}" ]]; then
    read -r L H A S <<< "${SPEC[1.3B]}"
    stage megatron_1.3B_breakdown 90 "$OUT/breakdown_1.3B.log" "$BUILD/megatron" bench \
      --mode step --device cuda --bf16 --use-flash-attn --breakdown --num-layers "$L" \
      --hidden-size "$H" --num-attention-heads "$A" --seq-length "$S" --max-position-embeddings "$S" \
      --micro-batch-size "${M_MBS[1.3B]}" --global-batch-size "${M_MBS[1.3B]}" --warmup-iters 2 \
      --timed-iters 1 || true
  fi
elif ((BUILT)); then
  say "benchmarks skipped: $([[ -z "$GPU_NAME" ]] && echo "no GPU visible" || echo "build without CUDA")"
fi

# ---- 5. summary --------------------------------------------------------------------------------
# The MFU denominator: the best bf16 GEMM rate measured in this run (megatron's cuBLASLt
# ceiling, PyTorch's matmul; the step bench's own small 2048^3 ceiling only if nothing else).
CEIL=""
CEIL_FROM=""
for pair in "megatron bench --mode kernels 8192^3:$CEIL_MEGATRON" "PyTorch matmul 8192^3:$CEIL_TORCH"; do
  v="${pair##*:}"
  [[ -z "$v" ]] && continue
  if [[ -z "$CEIL" ]] || awk -v a="$v" -v b="$CEIL" 'BEGIN { exit !(a > b) }'; then
    CEIL="$v"
    CEIL_FROM="${pair%:*}"
  fi
done
if [[ -z "$CEIL" && -n "$CEIL_STEP" ]]; then
  CEIL="$CEIL_STEP"
  CEIL_FROM="megatron bench --mode step 2048^3"
fi

COMMIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
DIRTY="$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | grep -q . && echo "+changes")"
DATE="$(date -u +%Y-%m-%d)"
SUMMARY="$OUT/summary.md"
TSV="$OUT/results.tsv"
printf 'model\tlayers\thidden\theads\tseq\tframework\tmicro_batch\ttokens_per_s\ttflops\tmfu_pct\n' > "$TSV"
fmt() { awk -v x="$1" -v d="$2" -v u="${3:-}" 'BEGIN { if (x == "") print "—"; else printf "%.*f%s", d, x, u }'; }
{
  echo "# scripts/gpu_check.sh — $DATE, commit $COMMIT$DIRTY"
  echo
  echo "- GPU: ${GPU_NAME:-none visible}; driver $DRIVER; nvcc ${NVCC:-none}; CUDA build $CUDA_MODE; PyTorch ${TORCH:-none}"
  echo "- bf16 GEMM ceiling: ${CEIL:-not measured} TFLOP/s (${CEIL_FROM:-—}); megatron kernels ${CEIL_MEGATRON:-—}, PyTorch ${CEIL_TORCH:-—}, megatron step-bench ${CEIL_STEP:-—}"
  echo "- tests: $TESTS_SUMMARY"
  echo "- stages (name, status, seconds):"
  sed 's/^/    /' "$OUT/stages.tsv"
  echo "- total: $(elapsed) s of a $BUDGET s budget"
  echo
  echo "## For bench/RESULTS.md"
  echo
  echo "GPT training steps in bf16 on one ${GPU_NAME:-GPU} ($DATE, commit $COMMIT$DIRTY, \`scripts/gpu_check.sh\`):"
  echo "tokens/s of one optimizer step of one micro-batch on mock data, TFLOP/s by Megatron's formula"
  echo "(vocabulary padded to $VOCAB_PADDED), MFU against the ${CEIL:-?} TFLOP/s bf16 GEMM ceiling measured in the same run"
  echo "(${CEIL_FROM:-none}); PyTorch ${TORCH%% *}: same model and tokens per step, SDPA attention, bf16 autocast, fused AdamW."
  echo
  echo "| model | L | h | heads | s | micro-batch | megatron tokens/s | megatron TFLOP/s | megatron MFU | PyTorch tokens/s | PyTorch TFLOP/s | PyTorch MFU | megatron / PyTorch |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
  for model in 124M 350M 1.3B; do
    read -r L H A S <<< "${SPEC[$model]}"
    fpt=$(flops_per_token "$L" "$H" "$S")
    mt="${M_TOKS[$model]:-}"
    pt="${P_TOKS[$model]:-}"
    mtf=""; ptf=""; mmfu=""; pmfu=""; ratio=""
    [[ -n "$mt" ]] && mtf=$(awk -v t="$mt" -v f="$fpt" 'BEGIN { printf "%.1f", t * f / 1e12 }')
    [[ -n "$pt" ]] && ptf=$(awk -v t="$pt" -v f="$fpt" 'BEGIN { printf "%.1f", t * f / 1e12 }')
    [[ -n "$mtf" && -n "$CEIL" ]] && mmfu=$(awk -v a="$mtf" -v c="$CEIL" 'BEGIN { printf "%.1f", 100 * a / c }')
    [[ -n "$ptf" && -n "$CEIL" ]] && pmfu=$(awk -v a="$ptf" -v c="$CEIL" 'BEGIN { printf "%.1f", 100 * a / c }')
    [[ -n "$mt" && -n "$pt" ]] && ratio=$(awk -v a="$mt" -v b="$pt" 'BEGIN { printf "%.2f", a / b }')
    mb="${M_MBS[$model]:-${P_MBS[$model]:-${MBS[$model]}}}"
    if [[ -n "${M_MBS[$model]:-}" && -n "${P_MBS[$model]:-}" && "${M_MBS[$model]}" != "${P_MBS[$model]}" ]]; then
      mb="${M_MBS[$model]} / ${P_MBS[$model]}"
    fi
    echo "| GPT $model | $L | $H | $A | $S | $mb | $(fmt "$mt" 0) | $(fmt "$mtf" 1) | $(fmt "$mmfu" 1 %) | $(fmt "$pt" 0) | $(fmt "$ptf" 1) | $(fmt "$pmfu" 1 %) | $(fmt "$ratio" 2 ×) |"
    [[ -n "$mt" ]] && printf '%s\t%s\t%s\t%s\t%s\tmegatron\t%s\t%s\t%s\t%s\n' "$model" "$L" "$H" "$A" "$S" "${M_MBS[$model]}" "$mt" "$mtf" "$mmfu" >> "$TSV"
    [[ -n "$pt" ]] && printf '%s\t%s\t%s\t%s\t%s\tpytorch\t%s\t%s\t%s\t%s\n' "$model" "$L" "$H" "$A" "$S" "${P_MBS[$model]}" "$pt" "$ptf" "$pmfu" >> "$TSV"
  done
  echo
  echo "fused attention (--use-flash-attn), tokens/s and ratio to the batched-GEMM attention above: $(
    for m in "${FLASH_MODELS[@]}"; do
      f="${F_TOKS[$m]:-}"; b="${M_TOKS[$m]:-}"
      r=""; [[ -n "$f" && -n "$b" ]] && r=$(awk -v a="$f" -v c="$b" 'BEGIN { printf "%.2f", a / c }')
      printf '%s %s (%s)  ' "$m" "$(fmt "$f" 0)" "$(fmt "$r" 2 ×)"
    done)"
  read -r AMF AMB <<< "${ATTN_MEGATRON:-}"
  read -r APF APB <<< "${ATTN_TORCH:-}"
  ar=""; [[ -n "${AMB:-}" && -n "${APB:-}" ]] && ar=$(awk -v a="$AMB" -v b="$APB" 'BEGIN { printf "%.2f", a / b }')
  echo "causal attention alone, bf16, b 4 s 2048 16 heads of 128 (FlashAttention's FLOP count), TFLOP/s forward / forward+backward: megatron fused $(fmt "${AMF:-}" 1) / $(fmt "${AMB:-}" 1), PyTorch SDPA $(fmt "${APF:-}" 1) / $(fmt "${APB:-}" 1), megatron / PyTorch forward+backward $(fmt "$ar" 2 ×)"
  if [[ -s "$OUT/breakdown_1.3B.log" ]]; then
    echo
    echo "GPT 1.3B step with --use-flash-attn, per kernel (GPU time; breakdown_1.3B.log has every row):"
    echo
    echo '```'
    grep -A 16 'breakdown per step' "$OUT/breakdown_1.3B.log" | head -17
    grep -E '^  (outside kernels|step) ' "$OUT/breakdown_1.3B.log"
    echo '```'
  fi
  echo "megatron's own MFU line (against its step-bench ceiling): $(for m in 124M 350M 1.3B; do printf '%s %s  ' "$m" "${M_SELF_MFU[$m]:-—}"; done)"
  # megatron plan with the machine file measured above, against the steps measured above:
  # tokens/s, and the tensors' peak (the plan's total without the runtime's reserved memory)
  # against the caching allocator's max allocated (MiB).
  if [[ -s "$OUT/machine_gpu.json" ]]; then
    echo
    echo "megatron plan with the machine file measured here (machine_gpu.json), predicted / measured:"
    for model in 124M 350M 1.3B; do
      [[ -n "${M_TOKS[$model]:-}" ]] || continue
      read -r L H A S <<< "${SPEC[$model]}"
      "$BUILD/megatron" plan --machine "$OUT/machine_gpu.json" --bf16 --num-layers "$L" \
        --hidden-size "$H" --num-attention-heads "$A" --seq-length "$S" --max-position-embeddings "$S" \
        --vocab-size 50257 --micro-batch-size "${M_MBS[$model]}" --global-batch-size "${M_MBS[$model]}" \
        > "$OUT/plan_$model.txt" 2>> "$OUT/machine.log"
      predicted=$(grep -o '^throughput: [0-9.e+]* tokens/s' "$OUT/plan_$model.txt" | awk '{ print $2 }')
      tensors=$(awk '$1 == "total" { t = $2 } $1 == "reserved" { r = $3 } END { if (t != "") printf "%.2f", t - r }' "$OUT/plan_$model.txt")
      measured_gib=$(awk -v m="${M_MAXALLOC[$model]:-}" 'BEGIN { if (m != "") printf "%.2f", m / 1024 }')
      err() { awk -v p="$1" -v m="$2" 'BEGIN { if (p == "" || m == "") print "—"; else printf "%+.1f%%", 100 * (p / m - 1) }'; }
      echo "  GPT $model: tokens/s $(fmt "$predicted" 0) / $(fmt "${M_TOKS[$model]}" 0) ($(err "$predicted" "${M_TOKS[$model]}")); tensors GiB $(fmt "$tensors" 2) / $(fmt "$measured_gib" 2) ($(err "$tensors" "$measured_gib"))"
    done
  fi
} > "$SUMMARY"
rm -f "$OUT/stages.tsv"
echo
cat "$SUMMARY"
say "done in $(elapsed)s; files in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
exit "$FAILED"
