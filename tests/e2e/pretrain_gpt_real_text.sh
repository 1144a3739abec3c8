#!/usr/bin/env bash
# Real text: a slice of the State of the Union corpus, GPT-2 BPE, 2 processes (TP 2), --bf16,
# a tiny GPT — the validation loss must fall between the first and the last evaluation and end
# well below the uniform-prediction loss ln(50257) = 10.8.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
DATA_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
"$MEGATRON_SOURCE_DIR/scripts/fetch_data.sh" > /dev/null

head -n 20 "$DATA_DIR/sotu.jsonl" > "$WORK/sotu20.jsonl"
timeout 300 "$MEGATRON_BINARY" preprocess --input "$WORK/sotu20.jsonl" \
  --output-prefix "$WORK/sotu" --tokenizer-type GPT2BPETokenizer \
  --vocab-file "$DATA_DIR/gpt2-vocab.json" --merge-file "$DATA_DIR/gpt2-merges.txt" \
  --append-eod --workers 2 > "$WORK/preprocess.log" 2>&1 ||
  { cat "$WORK/preprocess.log"; echo "FAIL: preprocess"; exit 1; }

timeout 600 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" pretrain-gpt \
  --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64 \
  --max-position-embeddings 64 --micro-batch-size 4 --global-batch-size 8 \
  --train-iters 40 --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 5 \
  --weight-decay 0.01 --clip-grad 1.0 --bf16 --tensor-model-parallel-size 2 \
  --data-path "$WORK/sotu_text_document" --split 949,50,1 \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json" \
  --merge-file "$DATA_DIR/gpt2-merges.txt" --eod-mask-loss \
  --log-interval 10 --eval-interval 10 --eval-iters 2 --seed 1234 \
  --metrics-file "$WORK/metrics.jsonl" > "$WORK/train.log" 2>&1 ||
  { cat "$WORK/train.log"; echo "FAIL: pretrain-gpt"; exit 1; }
grep "validation loss" "$WORK/train.log"

node -e '
  const v = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
              .map(JSON.parse).filter(r => r.type === "validation");
  const first = v[0].lm_loss, last = v[v.length - 1].lm_loss;
  if (v.length < 3 || !(last < first - 0.5) || !(last < 9.0)) {
    console.error("validation loss did not fall enough:", v.map(r => r.lm_loss));
    process.exit(1);
  }
  console.log(`validation loss ${first.toFixed(3)} -> ${last.toFixed(3)}`);' "$WORK/metrics.jsonl"
echo "real text: OK"
