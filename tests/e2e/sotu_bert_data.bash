# Sourced (never run; the .bash suffix keeps it out of the e2e tests CMake registers) by the BERT
# scenarios — pretrain_bert.sh, pipeline_layout_invariance_bert.sh, gpu_pretrain_bert.sh — which
# train on the same real text: the first 40 State of the Union documents of
# scripts/fetch_data.sh, split into sentences and tokenized with bert-base-uncased's WordPiece.
#
# Needs MEGATRON_BINARY and `set -euo pipefail` in the sourcing script.
# Sets DATA (the fetched files), VOCAB (the WordPiece vocabulary), WORK (a scratch directory,
# removed at exit) and BERT_DATA ($WORK/sotu_text_sentence, the dataset's prefix for
# --data-path).
: "${MEGATRON_BINARY:?}"
DATA="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
VOCAB="$DATA/bert-base-uncased-vocab.txt"
for f in sotu.jsonl bert-base-uncased-vocab.txt; do
  [[ -f "$DATA/$f" ]] || { echo "missing $DATA/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

head -n 40 "$DATA/sotu.jsonl" > "$WORK/in.jsonl"
"$MEGATRON_BINARY" preprocess --input "$WORK/in.jsonl" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$VOCAB" --split-sentences --output-prefix "$WORK/sotu" 2> /dev/null
BERT_DATA="$WORK/sotu_text_sentence"
