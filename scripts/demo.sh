#!/usr/bin/env bash
# The README's main job: install what is missing and build the `megatron` binary (only it: the
# tests are scripts/test.sh's), fetch the data, train a 4096-piece SentencePiece tokenizer on
# the State of the Union corpus and tokenize the corpus with it (both cached), pretrain a small
# GPT (4 layers, hidden 128, 4 heads, sequence 128) on 2 processes with tensor parallelism 2 for
# DEMO_MINUTES minutes (--exit-duration-in-mins), evaluating every 100 iterations (bf16 where
# the CPU multiplies bf16 natively: AMX or AVX512-BF16; f32 elsewhere), draw the loss curve
# (terminal chart + SVG), and let the model write: two prompts continued every 500 iterations
# during training (--sample-interval), three by `megatron generate` at tensor parallelism 2 at
# the end. Ends with how to serve the model and where everything is. Before it starts it says
# how long it will take on this machine; the build is of `megatron` alone, for this CPU (the
# CUDA backend only where a GPU is visible or MEGATRON_CUDA=ON asks for it), and prints its
# progress.
#
# Why not GPT-2's 50,257-token vocabulary: at this size its LM head would be ~85% of the FLOPs,
# and minutes on 2 cores would end in word salad; a vocabulary of the corpus itself, 12x
# smaller, leaves the compute to the layers.
#
# Environment: MEGATRON_DATA_DIR (data cache, default ~/.cache/megatron-cpp),
# MEGATRON_BUILD_DIR (default build/), DEMO_MINUTES (training time, default 6), DEMO_ITERS
# (iterations at most and the length of the LR schedule, default 4000), DEMO_OUT (run
# directory, default runs/demo/: checkpoints, metrics.jsonl, loss.svg, generated.jsonl,
# TensorBoard events, train.log).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
BUILD="${MEGATRON_BUILD_DIR:-$ROOT/build}"
OUT="${DEMO_OUT:-$ROOT/runs/demo}"
ITERS="${DEMO_ITERS:-4000}"
MINUTES="${DEMO_MINUTES:-6}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Only what this machine can run: the CUDA backend only where a GPU is visible (or asked for
# with MEGATRON_CUDA=ON); a build tree configured before keeps its own setting.
if [[ -z ${MEGATRON_CUDA:-} && ! -f $BUILD/CMakeCache.txt ]]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    export MEGATRON_CUDA=AUTO
  else
    export MEGATRON_CUDA=OFF
  fi
fi
CORES=$(nproc)
if [[ -x $BUILD/megatron ]]; then
  BUILD_NOTE="the build only recompiles what changed"
else
  # A clean CPU-only build of `megatron` alone: BUILD_CPU_MINUTES of CPU time on our VM
  # (bench/RESULTS.md, "The first hour"), spread over the cores.
  BUILD_CPU_MINUTES=6
  BUILD_NOTE="a first build of megatron takes about $(((BUILD_CPU_MINUTES + CORES - 1) / CORES)) min on $CORES idle cores"
fi
cat <<EOF
demo: expected time on this machine ($CORES cores): $BUILD_NOTE; then ~1 min to fetch the data
      and train the tokenizer (the first time only), $MINUTES min of training, and under a
      minute to evaluate, plot and generate.
demo: step 1/5 — install missing Debian packages and build build/megatron only${MEGATRON_CUDA:+ (CUDA backend $MEGATRON_CUDA)}
EOF
"$ROOT/scripts/setup.sh" megatron
echo "demo: step 2/5 — fetch the State of the Union corpus (and the vocabularies the tests use)"
"$ROOT/scripts/fetch_data.sh"
MEGATRON="$BUILD/megatron"

# A SentencePiece tokenizer of the corpus (Debian's spm_train, ~30 s) and the tokenized corpus,
# each rebuilt only when what it is made from is newer.
SP_MODEL="$DATA_DIR/sotu_sp4k.model"
PREFIX="$DATA_DIR/sotu_sp4k"
if [[ ! -f $SP_MODEL || $DATA_DIR/sotu.jsonl -nt $SP_MODEL ]]; then
  echo "demo: step 3/5 — train a 4096-piece SentencePiece tokenizer on the corpus (spm_train),"
  echo "      then tokenize the corpus with it (233 addresses, ~2.4 M tokens)"
  node -e '
    const fs = require("fs");
    const out = [];
    for (const line of fs.readFileSync(process.argv[1], "utf8").trim().split("\n"))
      for (const s of JSON.parse(line).text.split(/(?<=[.!?])\s+|\n+/)) if (s.trim()) out.push(s.trim());
    fs.writeFileSync(process.argv[2], out.join("\n") + "\n");' "$DATA_DIR/sotu.jsonl" "$DATA_DIR/sotu_sentences.txt"
  spm_train --input="$DATA_DIR/sotu_sentences.txt" --model_prefix="${SP_MODEL%.model}" \
    --vocab_size=4096 --model_type=unigram --input_sentence_size=300000 \
    --shuffle_input_sentence=true --minloglevel=1
else
  echo "demo: step 3/5 — the tokenizer is already trained ($SP_MODEL)"
fi
if [[ ! -f ${PREFIX}_text_document.idx || $SP_MODEL -nt ${PREFIX}_text_document.idx ]]; then
  "$MEGATRON" preprocess --input "$DATA_DIR/sotu.jsonl" --output-prefix "$PREFIX" \
    --tokenizer-type SentencePieceTokenizer --tokenizer-model "$SP_MODEL" --append-eod --workers 2
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
demo: step 4/5 — train a GPT for $MINUTES minutes on 2 processes, tensor parallelism 2:
      4 layers, hidden 128, 4 heads, sequence 128, batch 16 sequences (2048 tokens), $PRECISION_NAME,
      the corpus's own 4096-piece vocabulary, 95% of the addresses to train on, 5% held out.
      What to expect: the loss starts near 8.3 (ln 4096: a uniform guess over the vocabulary);
      on our 2-core VM (bf16, load ~5 from other builds: ~0.15 s per iteration) the validation
      loss was 6.1 (perplexity ~430) at iteration 100, 5.3 (~200) at 500, 5.1 (~165) at 1000,
      4.8 (~120) at 2000 and 4.7 (~112) at 2400, where the time limit stopped it; a busier
      machine stops earlier (at iteration ~400 under load 10: 5.8, ~330). Every 20 iterations
      Megatron's iteration line is followed by a progress line saying how much time is left and
      near which iteration the run will stop; every 100 comes a validation loss, and every 200
      the model continues two prompts (--sample-interval), so you can watch it learn to write.
      Then the model writes (step 5/5): expect recognisable, if broken, English.
EOF

rm -rf "$OUT"
mkdir -p "$OUT"
mpirun --oversubscribe --bind-to none -np 2 "$MEGATRON" pretrain-gpt \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
  --max-position-embeddings 256 --micro-batch-size 16 --global-batch-size 16 \
  --train-iters "$ITERS" --exit-duration-in-mins "$MINUTES" --lr 3e-3 --min-lr 3e-4 \
  --lr-decay-style cosine --lr-warmup-fraction 0.02 --weight-decay 0.1 --clip-grad 1.0 \
  "${PRECISION[@]}" --tensor-model-parallel-size 2 \
  --data-path "${PREFIX}_text_document" --split 949,50,1 \
  --tokenizer-type SentencePieceTokenizer --tokenizer-model "$SP_MODEL" \
  --log-interval 20 --eval-interval 100 --eval-iters 8 --save "$OUT/checkpoints" \
  --sample-interval 200 --sample-prompt "The Congress of the United States" \
  --sample-prompt "Our economy" --sample-tokens 24 \
  --metrics-file "$OUT/metrics.jsonl" --tensorboard-dir "$OUT/tensorboard" | tee "$OUT/train.log"

echo
"$MEGATRON" plot "$OUT/metrics.jsonl" --output "$OUT/loss.svg" \
  --title "demo: GPT (4 layers, hidden 128) on the State of the Union, TP 2"

# The model writes: three prompts continued with nucleus sampling at TP 2 (the checkpoint
# records its tokenizer), each printed as it is generated.
echo
echo "demo: step 5/5 — the model writes (megatron generate: top-p 0.9, temperature 0.8, TP 2)"
mpirun --oversubscribe --bind-to none -np 2 "$MEGATRON" generate --load "$OUT/checkpoints" \
  --tokens-to-generate 48 --top-p 0.9 --temperature 0.8 --seed 1 \
  --prompt "The Congress of the United States" --prompt "Our economy" \
  --prompt "I have the honor to" --output-file "$OUT/generated.jsonl" | grep -v "^generate: "
cat <<EOF
demo: everything is in $OUT/
        loss.svg       training and validation loss, and the learning rate, against iterations
                       (open it in a web browser)
        metrics.jsonl  one JSON object per logged iteration, evaluation and sample
        generated.jsonl  the three continuations above (prompt, text, tokens)
        train.log      the console output above
        checkpoints/   Megatron's layout; continue training with --load $OUT/checkpoints
        tensorboard/   TensorBoard events, for \`tensorboard --logdir $OUT/tensorboard\` if you
                       have TensorBoard (not needed: loss.svg shows the same curves)
      Talk to the model in a browser: $MEGATRON serve --load $OUT/checkpoints
      (then open http://127.0.0.1:5000/), or at a prompt: $MEGATRON generate --load $OUT/checkpoints
      Next: "Train on your own text" in README.md.
EOF
