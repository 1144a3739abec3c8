# Sourced (never run; the .bash suffix keeps it out of the e2e tests CMake registers) by the
# GPU scenarios, tests/e2e/gpu_*.sh, which skip where the binary cannot run on a GPU.
# Defines:
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
