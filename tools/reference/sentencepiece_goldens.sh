#!/usr/bin/env bash
# Writes the SentencePiece golden files of the GPTSentencePieceTokenizer / Llama2Tokenizer tests
# into tests/data/tokenizers/:
#   llama_style.model   a 1000-piece BPE model with Llama 2's settings (byte fallback, split
#                       digits, identity normalization, whitespace kept, <unk>=0 <s>=1 </s>=2,
#                       no pad), trained by Debian's spm_train on every third State of the Union
#                       address, one sentence a line
#   sentencepiece.ids   Debian's spm_encode --output_format=id of tokenizer_golden.txt (written by
#                       bpe_tokenizer_goldens.js), one line of ids per line of text: spm_encode
#                       reads lines, so the test encodes the text line by line too (a line keeps
#                       its "\r").
# Megatron-LM's current main encodes with the model alone (SentencePieceTokenizer.text_to_ids =
# encode_as_ids, for GPTSentencePieceTokenizer and Llama2Tokenizer alike): no BOS or EOS, so
# these ids are the expected ids of both tokenizer types.
#
# Usage: tools/reference/sentencepiece_goldens.sh [DATA_DIR] [OUT_DIR]
#   DATA_DIR default ${MEGATRON_DATA_DIR:-~/.cache/megatron-cpp}, OUT_DIR tests/data/tokenizers.
set -euo pipefail
DATA="${1:-${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}}"
OUT="${2:-$(dirname "$0")/../../tests/data/tokenizers}"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

python3 - "$DATA/sotu.jsonl" > "$TMP/train.txt" <<'EOF'
import json, re, sys
lines = open(sys.argv[1], encoding='utf-8').read().split('\n')
for line in lines[::3]:
    if line:
        for sentence in re.split(r'(?<=[.!?])\s+', json.loads(line)['text']):
            if sentence:
                print(sentence[:2000])
EOF
spm_train --input="$TMP/train.txt" --model_prefix="$TMP/llama_style" --model_type=bpe \
  --vocab_size=1000 --byte_fallback=true --split_digits=true --normalization_rule_name=identity \
  --remove_extra_whitespaces=false --allow_whitespace_only_pieces=true --character_coverage=0.9999 \
  --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --num_threads=1 --input_sentence_size=0 \
  > "$TMP/train.log" 2>&1 || { cat "$TMP/train.log" >&2; exit 1; }
cp "$TMP/llama_style.model" "$OUT/llama_style.model"
spm_encode --model="$OUT/llama_style.model" --output_format=id \
  < "$OUT/tokenizer_golden.txt" > "$OUT/sentencepiece.ids"
echo "wrote $OUT/llama_style.model and $(wc -l < "$OUT/sentencepiece.ids") lines of ids"
