# Sourced (never run; the .bash suffix keeps it out of the e2e tests CMake registers) by the
# GPU scenarios, tests/e2e/gpu_*.sh, which skip where the binary cannot run on a GPU.
# Defines:
#   run_on_gpu_and_cpu WHAT ARGS...
#     runs "$MEGATRON_BINARY" ARGS on cuda:0, then on the CPU (--device D --metrics-file
#     $WORK/D.jsonl, output in $WORK/D.log; the caller sets WORK): a failed GPU run goes to
#     gpu_or_skip, a failed CPU run prints its log and fails with "FAIL: WHAT on the CPU".
#   gpu_or_skip LOG WHAT
#     after a failed run on the GPU whose output is LOG: exits 77 (CTest's skip) when the binary
#     has no CUDA or no GPU is visible (its error says which), else prints LOG and fails with
#     "FAIL: WHAT".
gpu_or_skip() {
  if grep -q -e "built without CUDA" -e "no GPU is visible" "$1"; then
    echo "SKIP: no CUDA build or no GPU: $(grep -m1 error "$1")"
    exit 77
  fi
  cat "$1"
  echo "FAIL: $2"
  exit 1
}

run_on_gpu_and_cpu() {
  local what=$1 device
  shift
  for device in cuda:0 cpu; do
    if ! "$MEGATRON_BINARY" "$@" --device "$device" --metrics-file "$WORK/$device.jsonl" \
      > "$WORK/$device.log" 2>&1; then
      [[ "$device" == cpu ]] || gpu_or_skip "$WORK/$device.log" "$what on the GPU"
      cat "$WORK/$device.log"
      echo "FAIL: $what on the CPU"
      exit 1
    fi
  done
}
