# Sourced by the Megatron-LM checkpoint scenarios (convert_megatron_lm.sh,
# convert_megatron_torch_dist.sh): a scratch directory, the fixtures' paths, and
#   convert ARGS...                  `megatron convert --model-type gpt ARGS`, failing loudly
#   expect_error MESSAGE COMMAND...  the megatron command fails and prints MESSAGE
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
MLM="$MEGATRON_SOURCE_DIR/tests/data/megatron_lm_gpt_tiny"
HF="$MEGATRON_SOURCE_DIR/tests/data/gpt2_tiny/hf"
fail() { echo "FAIL: $*"; exit 1; }
convert() { "$MEGATRON_BINARY" convert --model-type gpt "$@" > "$WORK/last.log" 2>&1 \
              || { cat "$WORK/last.log"; fail "convert $*"; }; }
expect_error() {
  local message=$1
  shift
  if "$MEGATRON_BINARY" "$@" > "$WORK/err.log" 2>&1; then fail "no error for: $*"; fi
  grep -qF -- "$message" "$WORK/err.log" || { cat "$WORK/err.log"; fail "expected '$message'"; }
}
