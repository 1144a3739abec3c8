#!/usr/bin/env bash
# docs/megatron-compat.md is what the binary does: regenerating it from `--print-megatron-flags`
# gives the committed file, and every one of Megatron's flags appears in it.
set -euo pipefail
BIN="${MEGATRON_BINARY:?}"
SRC="${MEGATRON_SOURCE_DIR:?}"
generated="$(mktemp)"
trap 'rm -f "$generated"' EXIT
"$SRC/tools/megatron_compat_table.sh" "$BIN" > "$generated"
if ! diff -u "$SRC/docs/megatron-compat.md" "$generated"; then
  echo "FAIL: docs/megatron-compat.md is stale: run tools/megatron_compat_table.sh" >&2
  exit 1
fi
flags=$(grep -c '^{"--' "$SRC/src/cli/args/megatron_flag_list.inc")
rows=$(grep -c '^| `--' "$generated")
[[ "$flags" == "$rows" ]] || { echo "FAIL: $flags Megatron flags, $rows rows" >&2; exit 1; }
echo "ok: $rows Megatron flags documented"
