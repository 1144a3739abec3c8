# Sourced (never run; the .bash suffix keeps it out of the e2e tests CMake registers) by the
# `megatron serve` scenarios — serve_openai.sh, serve_batching.sh, serve_hardening.sh,
# serve_cancel.sh: a scratch directory, servers stopped at exit, and the tools they need.
#
# Needs MEGATRON_BINARY, MEGATRON_SOURCE_DIR and `set -euo pipefail` in the sourcing script.
# Sets WORK (removed at exit) and PIDS (append each server's pid: killed at exit); defines
# fail, require_tools TOOL... (exit 77, skipped, when one is missing), tiny_gpt2_checkpoint
# DIR (the tiny HF GPT-2 of tests/data imported into DIR, vocabulary padded to a multiple of 32)
# and openai_npm_client (the official npm client's directory, installed once).
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

require_tools() {
  local tool
  for tool in "$@"; do
    command -v "$tool" > /dev/null || { echo "$tool is not installed: skipping"; exit 77; }
  done
}

tiny_gpt2_checkpoint() {
  "$MEGATRON_BINARY" convert --model-type gpt --from hf \
    --load "$MEGATRON_SOURCE_DIR/tests/data/gpt2_tiny/hf" --save "$1" \
    --make-vocab-size-divisible-by 32 > "$WORK/convert.log" 2>&1 ||
    { cat "$WORK/convert.log"; fail "convert"; }
}

# The official `openai` npm client, installed once into $MEGATRON_DATA_DIR (outside the
# checkout); prints its directory. Without npm or its registry the calling test is skipped.
openai_npm_client() {
  local version=4.104.0
  local dir="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}/npm-openai-$version"
  if [[ ! -f $dir/node_modules/openai/package.json ]]; then
    command -v npm > /dev/null || { echo "npm is not installed (apt-get install npm): skipping" >&2; exit 77; }
    mkdir -p "$dir"
    timeout 300 npm install --prefix "$dir" --no-audit --no-fund "openai@$version" > "$WORK/npm.log" 2>&1 ||
      { tail -n 5 "$WORK/npm.log" >&2; echo "the npm registry is not reachable: skipping" >&2; exit 77; }
  fi
  echo "$dir"
}
