#!/usr/bin/env bash
# `megatron merge-datasets` (Megatron's tools/merge_datasets.py): preprocessing a corpus in two
# halves and merging them gives the same files as preprocessing it whole; and Megatron's
# --partitions / list-valued keys reach preprocess.
set -euo pipefail
BIN="${MEGATRON_BINARY:?}"
DATA="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
for f in sotu.jsonl gpt2-vocab.json gpt2-merges.txt; do
  [[ -f "$DATA/$f" ]] || { echo "missing $DATA/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
TOK=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2-vocab.json"
     --merge-file "$DATA/gpt2-merges.txt" --append-eod)
head -n 30 "$DATA/sotu.jsonl" > "$WORK/all.jsonl"
head -n 12 "$WORK/all.jsonl" > "$WORK/a.jsonl"
tail -n 18 "$WORK/all.jsonl" > "$WORK/b.jsonl"
mkdir "$WORK/parts"
"$BIN" preprocess --input "$WORK/all.jsonl" "${TOK[@]}" --output-prefix "$WORK/whole" 2> /dev/null
"$BIN" preprocess --input "$WORK/a.jsonl" "${TOK[@]}" --output-prefix "$WORK/parts/1" 2> /dev/null
"$BIN" preprocess --input "$WORK/b.jsonl" "${TOK[@]}" --output-prefix "$WORK/parts/2" 2> /dev/null
"$BIN" merge-datasets --input "$WORK/parts" --output-prefix "$WORK/merged"
cmp "$WORK/whole_text_document.bin" "$WORK/merged.bin"
cmp "$WORK/whole_text_document.idx" "$WORK/merged.idx"

# A stray file without its pair is refused, naming it.
touch "$WORK/parts/stray.bin"
if "$BIN" merge-datasets --input "$WORK/parts" --output-prefix "$WORK/m2" 2> "$WORK/err"; then
  echo "FAIL: a .bin without .idx was merged" >&2; exit 1
fi
grep -q "stray.bin' has no .idx file beside it" "$WORK/err"

# --partitions 2 with --keep-sequential-samples keeps the order: the same files.
"$BIN" preprocess --input "$WORK/all.jsonl" "${TOK[@]}" --output-prefix "$WORK/seq" \
  --partitions 2 --keep-sequential-samples --workers 2 2> /dev/null
cmp "$WORK/whole_text_document.bin" "$WORK/seq_text_document.bin"
echo "ok: merge-datasets"
