#!/usr/bin/env bash
# The README's main job: install what is missing and build the `megatron` binary (only it: the
# tests are scripts/test.sh's), fetch the data, tokenize the State of the Union corpus with
# GPT-2 BPE (cached), and pretrain a small GPT (4 layers, hidden 256, 8 heads, sequence 256) on
# 2 processes with tensor parallelism 2 for DEMO_MINUTES minutes (--exit-duration-in-mins),
# evaluating every 25 iterations (bf16 where the CPU multiplies bf16 natively: AMX or
# AVX512-BF16; f32 elsewhere). Ends with the loss curve (terminal chart + SVG), the final
# validation perplexity and where everything is.
#
# Environment: MEGATRON_DATA_DIR (data cache, default ~/.cache/megatron-cpp),
# MEGATRON_BUILD_DIR (default build/), DEMO_MINUTES (training time, default 6), DEMO_ITERS
# (iterations at most, default 400), DEMO_OUT (run directory, default runs/demo/: checkpoints,
# metrics.jsonl, loss.svg, TensorBoard events, train.log).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
BUILD="${MEGATRON_BUILD_DIR:-$ROOT/build}"
OUT="${DEMO_OUT:-$ROOT/runs/demo}"
ITERS="${DEMO_ITERS:-400}"
MINUTES="${DEMO_MINUTES:-6}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

echo "demo: step 1/4 — install missing Debian packages and build build/megatron (first time:"
echo "      several minutes; later runs only rebuild what changed)"
"$ROOT/scripts/setup.sh" megatron
echo "demo: step 2/4 — fetch GPT-2's vocabulary and the State of the Union corpus"
"$ROOT/scripts/fetch_data.sh"
MEGATRON="$BUILD/megatron"

# Tokenize once: the .bin/.idx are rebuilt only when the corpus is newer than them.
PREFIX="$DATA_DIR/sotu_gpt2"
if [[ ! -f ${PREFIX}_text_document.idx || $DATA_DIR/sotu.jsonl -nt ${PREFIX}_text_document.idx ]]; then
  echo "demo: step 3/4 — tokenize the corpus with GPT-2 BPE (233 addresses, ~2 M tokens)"
  "$MEGATRON" preprocess --input "$DATA_DIR/sotu.jsonl" --output-prefix "$PREFIX" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json" \
    --merge-file "$DATA_DIR/gpt2-merges.txt" --append-eod --workers 2
else
  echo "demo: step 3/4 — the corpus is already tokenized (${PREFIX}_text_document.bin)"
fi

# bf16 pays where the CPU multiplies bf16 natively (AMX or AVX512-BF16, via oneDNN); elsewhere
# bf16 GEMMs are widened to f32 and cost more than plain f32, so the demo trains in f32 there.
PRECISION=()
PRECISION_NAME="f32 (this CPU has no native bf16)"
if grep -qE 'amx_bf16|avx512_bf16' /proc/cpuinfo; then
  PRECISION=(--bf16)
  PRECISION_NAME="bf16 (this CPU multiplies bf16 natively)"
fi

cat <<EOF
demo: step 4/4 — train a GPT for $MINUTES minutes on 2 processes, tensor parallelism 2:
      4 layers, hidden 256, 8 heads, sequence 256, batch 8 sequences (2048 tokens), $PRECISION_NAME,
      GPT-2's 50,257-token vocabulary, 95% of the addresses to train on, 5% held out to validate.
      What to expect: the loss starts near 10.9 (ln 50257: a uniform guess over the vocabulary);
      the validation loss is about 7.6 (perplexity ~1900) at iteration 25, 7.2 (~1300) at 50 and
      6.9 (~1000) near 90, falling slowly after that. An iteration takes a few seconds on 2 cores
      (7 s on our 2-core VM while other builds ran), so the time limit stops the run long before
      its $ITERS iterations: every 10 iterations Megatron's iteration line is followed by a
      progress line saying how much time is left and near which iteration the run will stop;
      every 25 comes a validation loss. The model is tiny and the time short: expect a falling
      curve, not prose.
EOF

rm -rf "$OUT"
mkdir -p "$OUT"
mpirun --oversubscribe --bind-to none -np 2 "$MEGATRON" pretrain-gpt \
  --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 \
  --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 8 \
  --train-iters "$ITERS" --exit-duration-in-mins "$MINUTES" --lr 1e-3 --min-lr 1e-4 \
  --lr-decay-style cosine --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0 \
  "${PRECISION[@]}" --tensor-model-parallel-size 2 \
  --data-path "${PREFIX}_text_document" --split 949,50,1 \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json" \
  --merge-file "$DATA_DIR/gpt2-merges.txt" \
  --log-interval 10 --eval-interval 25 --eval-iters 4 --save "$OUT/checkpoints" \
  --metrics-file "$OUT/metrics.jsonl" --tensorboard-dir "$OUT/tensorboard" | tee "$OUT/train.log"

echo
"$MEGATRON" plot "$OUT/metrics.jsonl" --output "$OUT/loss.svg" \
  --title "demo: GPT (4 layers, hidden 256) on the State of the Union, TP 2"
cat <<EOF
demo: everything is in $OUT/
        loss.svg       training and validation loss against iterations and tokens (open it in
                       a web browser)
        metrics.jsonl  one JSON object per logged iteration and per evaluation
        train.log      the console output above
        checkpoints/   Megatron's layout; continue training with --load $OUT/checkpoints
        tensorboard/   TensorBoard events, for \`tensorboard --logdir $OUT/tensorboard\` if you
                       have TensorBoard (not needed: loss.svg shows the same curves)
      Next: "Train on your own text" in README.md.
EOF
