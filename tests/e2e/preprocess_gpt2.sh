#!/usr/bin/env bash
# e2e: `megatron preprocess` on real GPT-2 BPE and the State of the Union corpus.
#  - 1 and 4 workers give byte-identical .bin/.idx;
#  - an independent Python reader (struct + numpy, Megatron's layout) decodes every document
#    back to its JSON text followed by <|endoftext|>;
#  - a malformed line stops the run with its line number, a non-zero exit and no outputs;
#    --keep-going skips and counts it;
#  - --split-sentences with BERT WordPiece writes a sentence-level dataset.
# Needs the files of scripts/fetch_data.sh (scripts/test.sh runs it first).
set -euo pipefail
BIN="${MEGATRON_BINARY:?}"
DATA="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
for f in sotu.jsonl gpt2-vocab.json gpt2-merges.txt bert-base-uncased-vocab.txt; do
  [[ -f "$DATA/$f" ]] || { echo "missing $DATA/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

head -n 40 "$DATA/sotu.jsonl" > "$WORK/in.jsonl"
printf '%s\n' '{"text": "Unicode: café – naïve “quotes” 日本語 🙂\nnew line"}' '{"text": ""}' >> "$WORK/in.jsonl"
GPT=(--tokenizer-type GPT2BPETokenizer --vocab-file "$DATA/gpt2-vocab.json"
     --merge-file "$DATA/gpt2-merges.txt" --append-eod)

"$BIN" preprocess --input "$WORK/in.jsonl" "${GPT[@]}" --output-prefix "$WORK/w1" --workers 1
"$BIN" preprocess --input "$WORK/in.jsonl" "${GPT[@]}" --output-prefix "$WORK/w4" --workers 4 \
  --log-interval 10 2> "$WORK/progress.txt"
cmp "$WORK/w1_text_document.bin" "$WORK/w4_text_document.bin"
cmp "$WORK/w1_text_document.idx" "$WORK/w4_text_document.idx"
grep -q "Processed 40 documents (.* docs/s, .* MB/s)" "$WORK/progress.txt"

/usr/bin/python3 - "$WORK/w1_text_document" "$WORK/in.jsonl" "$DATA/gpt2-vocab.json" <<'PY'
import json, struct, sys
import numpy as np
prefix, jsonl, vocab_file = sys.argv[1:]
idx = open(prefix + ".idx", "rb").read()
assert idx[:9] == b"MMIDIDX\x00\x00", "magic"
version, = struct.unpack("<Q", idx[9:17]); assert version == 1
code = idx[17]; assert code == 8, f"dtype code {code}, expected 8 (uint16)"
n, d = struct.unpack("<QQ", idx[18:34])
lengths = np.frombuffer(idx, np.int32, n, 34)
pointers = np.frombuffer(idx, np.int64, n, 34 + 4 * n)
doc_idx = np.frombuffer(idx, np.int64, d, 34 + 12 * n)
assert len(idx) == 34 + 12 * n + 8 * d
texts = [json.loads(l)["text"] for l in open(jsonl, encoding="utf-8")]
assert d == len(texts) + 1 and doc_idx[0] == 0 and doc_idx[-1] == n
assert list(np.diff(doc_idx)) == [1] * (len(texts) - 1) + [0], "one sequence per non-empty doc"
data = np.fromfile(prefix + ".bin", np.uint16)
assert pointers[0] == 0 and all(pointers[1:] == pointers[:-1] + 2 * lengths[:-1].astype(np.int64))
assert data.size == lengths.sum()
# GPT-2's byte-level decoding: vocab strings map back to bytes through bytes_to_unicode.
bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
cs = bs[:]
k = 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
byte_of = {chr(c): b for b, c in zip(bs, cs)}
inv = {i: s for s, i in json.load(open(vocab_file, encoding="utf-8")).items()}
for doc, text in enumerate(texts[:-1]):
    ids = data[pointers[doc] // 2 : pointers[doc] // 2 + lengths[doc]]
    assert ids[-1] == 50256, "EOD last"
    raw = bytes(byte_of[ch] for i in ids[:-1] for ch in inv[int(i)])
    assert raw.decode("utf-8") == text, f"document {doc} does not decode to its text"
print(f"verified {len(texts)} documents, {n} sequences, {data.size} tokens")
PY

# A malformed line: error naming line 43, non-zero exit, nothing written.
cp "$WORK/in.jsonl" "$WORK/bad.jsonl"
echo '{"text": "unterminated' >> "$WORK/bad.jsonl"
echo '{"text": "after"}' >> "$WORK/bad.jsonl"
if "$BIN" preprocess --input "$WORK/bad.jsonl" "${GPT[@]}" --output-prefix "$WORK/bad" \
  --workers 4 2> "$WORK/err.txt"; then
  echo "malformed input was accepted" >&2; exit 1
fi
grep -q "bad.jsonl' line 43: malformed JSON" "$WORK/err.txt"
if compgen -G "$WORK/bad_*" > /dev/null; then echo "partial outputs left" >&2; exit 1; fi

"$BIN" preprocess --input "$WORK/bad.jsonl" "${GPT[@]}" --output-prefix "$WORK/kg" \
  --keep-going 2> "$WORK/kg.txt"
grep -q "Skipped 1 malformed line(s); the first: .*line 43" "$WORK/kg.txt"
/usr/bin/python3 -c "
import struct,sys
idx=open('$WORK/kg_text_document.idx','rb').read()
n,d=struct.unpack('<QQ',idx[18:34]); assert d-1==43, d"

# Sentence level with BERT WordPiece.
"$BIN" preprocess --input "$WORK/in.jsonl" --tokenizer-type BertWordPieceLowerCase \
  --vocab-file "$DATA/bert-base-uncased-vocab.txt" --split-sentences \
  --output-prefix "$WORK/bert" --workers 2
/usr/bin/python3 - "$WORK/bert_text_sentence.idx" <<'PY'
import struct, sys
import numpy as np
idx = open(sys.argv[1], "rb").read()
n, d = struct.unpack("<QQ", idx[18:34])
doc_idx = np.frombuffer(idx, np.int64, d, 34 + 12 * n)
assert d == 43 and doc_idx[-1] == n
sentences = np.diff(doc_idx)
assert (sentences[:40] > 20).all(), "every address has many sentences"
print(f"{n} sentences in {d - 1} documents")
PY
echo "preprocess e2e: OK"
