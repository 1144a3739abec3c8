#!/usr/bin/env bash
# Fill-in-the-middle data (--fim-data, docs/data.md): a tiny GPT on real text (State of the
# Union, GPT-2 BPE with the four FIM sentinels appended to the vocabulary) with --fim-rate 0.5
# --fim-spm-rate 0.5, and with fragments cut at full stops (--fim-split-sample .
# --fim-fragment-rate 0.5), logs the same lm loss and grad norm (relative <= 1e-5, 6 iterations)
# at DP 1, DP 2, DP 4, TP 2 x DP 2 and PP 2 x DP 2, with --eod-mask-loss: each sample is a
# function of its index, whichever rank reads it. Without --fim-data, or without the fragments,
# the losses differ. A
# vocabulary without the sentinels is refused with a sentence naming --fim-prefix-token, and
# --fim-data with --mock-data is refused. The samples themselves are checked against
# tools/reference/fim_reference.py in tests/unit/data_fim_dataset_test.cpp.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
export OMP_NUM_THREADS=1
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
fail() { echo "FAIL: $*"; exit 1; }
# shellcheck source=tests/e2e/sotu_gpt_data.bash
source "$MEGATRON_SOURCE_DIR/tests/e2e/sotu_gpt_data.bash"

node -e '
const fs = require("fs");
const vocab = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
for (const t of ["<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"])
  vocab[t] = Object.keys(vocab).length;
fs.writeFileSync(process.argv[2], JSON.stringify(vocab));
' "$DATA_DIR/gpt2-vocab.json" "$WORK/fim-vocab.json"

GPT=(pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 64
  --max-position-embeddings 64 --micro-batch-size 2 --global-batch-size 8 --train-iters 6
  --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 2 --weight-decay 0.01
  --clip-grad 1.0 --seed 1234 --eod-mask-loss
  --data-path "$GPT_DATA" --split 949,50,1 --tokenizer-type GPT2BPETokenizer
  --merge-file "$DATA_DIR/gpt2-merges.txt" --make-vocab-size-divisible-by 128
  --log-interval 1 --eval-interval 1000 --eval-iters 0)
FIM=(--vocab-file "$WORK/fim-vocab.json" --fim-data --fim-rate 0.5 --fim-spm-rate 0.5)
SPLIT=(--fim-split-sample . --fim-fragment-rate 0.5)

run() {  # run NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" "${GPT[@]}" --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name"; }
}

run dp1 1 "${FIM[@]}"
run dp2 2 "${FIM[@]}"
run dp4 4 "${FIM[@]}"
run tp2_dp2 4 --tensor-model-parallel-size 2 "${FIM[@]}"
run pp2_dp2 4 --pipeline-model-parallel-size 2 "${FIM[@]}"
run split_dp1 1 "${FIM[@]}" "${SPLIT[@]}"
run split_dp4 4 "${FIM[@]}" "${SPLIT[@]}"
run plain 1 --vocab-file "$WORK/fim-vocab.json"
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/dp1.jsonl"
for name in dp2 dp4 tp2_dp2 pp2_dp2; do
  echo "== dp1 vs $name"
  $CHECK "$WORK/dp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== split_dp1 vs split_dp4"
$CHECK "$WORK/split_dp1.jsonl" "$WORK/split_dp4.jsonl" --from 1 --to 6 --rtol 1e-5
for name in plain split_dp1; do
  echo "== without --fim-data, or without fragments, the training differs ($name)"
  if $CHECK "$WORK/dp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5 \
    > "$WORK/differs.log" 2>&1; then
    fail "$name trained the same as dp1"
  fi
done

echo "== a vocabulary without the sentinels"
if "$MEGATRON_BINARY" "${GPT[@]}" --vocab-file "$DATA_DIR/gpt2-vocab.json" --fim-data \
  > "$WORK/no_sentinel.log" 2>&1; then fail "GPT-2's vocabulary was accepted for --fim-data"; fi
grep -q "no token '<fim_prefix>' (--fim-prefix-token); set --fim-prefix-token" \
  "$WORK/no_sentinel.log" || { cat "$WORK/no_sentinel.log"; fail "message"; }
echo "== --fim-data with --mock-data"
if "$MEGATRON_BINARY" pretrain-gpt --num-layers 1 --hidden-size 32 --num-attention-heads 2 \
  --seq-length 16 --max-position-embeddings 16 --micro-batch-size 1 --train-iters 1 --lr 1e-3 \
  --mock-data --vocab-size 64 --fim-data > "$WORK/mock.log" 2>&1; then
  fail "--fim-data with --mock-data was accepted"
fi
grep -q -- "--mock-data has no text" "$WORK/mock.log" || { cat "$WORK/mock.log"; fail "message"; }
echo "FIM data across layouts: OK"
