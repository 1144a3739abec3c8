# Sourced (never run; the .bash suffix keeps it out of the e2e tests CMake registers) by the GPT
# layout scenarios on real text — context_parallel.sh, fim_data_layouts.sh: the first 10 State
# of the Union documents of scripts/fetch_data.sh, tokenized with GPT-2's BPE, one EOD per
# document.
#
# Needs MEGATRON_BINARY and `set -euo pipefail` in the sourcing script, which defines fail().
# Sets DATA_DIR (the fetched files), WORK (a scratch directory, removed at exit) and GPT_DATA
# ($WORK/sotu_text_document, the dataset's prefix for --data-path).
: "${MEGATRON_BINARY:?}"
DATA_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
for f in sotu.jsonl gpt2-vocab.json gpt2-merges.txt; do
  [[ -f "$DATA_DIR/$f" ]] || { echo "missing $DATA_DIR/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

head -n 10 "$DATA_DIR/sotu.jsonl" > "$WORK/sotu10.jsonl"
timeout 300 "$MEGATRON_BINARY" preprocess --input "$WORK/sotu10.jsonl" \
  --output-prefix "$WORK/sotu" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$DATA_DIR/gpt2-vocab.json" --merge-file "$DATA_DIR/gpt2-merges.txt" \
  --append-eod --workers 1 > "$WORK/preprocess.log" 2>&1 ||
  { cat "$WORK/preprocess.log"; fail "preprocess"; }
GPT_DATA="$WORK/sotu_text_document"
