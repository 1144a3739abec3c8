#!/usr/bin/env bash
# The README's main job: set up and build, fetch the data, train a 4096-piece SentencePiece
# tokenizer on the State of the Union corpus and tokenize it (both cached), pretrain a small GPT
# (4 layers, h 128, 4 heads, s 128) on 2 processes with tensor parallelism 2 (bf16 where the CPU
# has AMX/AVX512-BF16) for a few minutes (--exit-duration-in-mins), evaluating as it goes; prints
# the final validation perplexity, then lets the model write (megatron generate, TP 2). Why not
# GPT-2's 50k vocabulary: at this size its LM head would be ~85% of the FLOPs, and a few minutes
# on 2 cores would end in word salad. About 10 minutes on 2 cores once the build is done.
#
# Environment: MEGATRON_DATA_DIR (data cache, default ~/.cache/megatron-cpp),
# MEGATRON_BUILD_DIR (default build/), DEMO_MINUTES (training time, default 6), DEMO_ITERS
# (iterations at most and the length of the LR schedule, default 800), DEMO_OUT (run directory,
# default demo_run/ — checkpoints, metrics.jsonl, TensorBoard events).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
BUILD="${MEGATRON_BUILD_DIR:-$ROOT/build}"
OUT="${DEMO_OUT:-$ROOT/demo_run}"
ITERS="${DEMO_ITERS:-800}"
MINUTES="${DEMO_MINUTES:-6}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # 2 processes share the 2 cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/fetch_data.sh"
MEGATRON="$BUILD/megatron"

# A SentencePiece tokenizer of the corpus (Debian's spm_train, ~30 s), then the tokenized
# corpus; both are rebuilt only when the corpus is newer than them.
SP_MODEL="$DATA_DIR/sotu_sp4k.model"
if [[ ! -f $SP_MODEL || $DATA_DIR/sotu.jsonl -nt $SP_MODEL ]]; then
  echo "demo: training a 4096-piece SentencePiece tokenizer on the corpus (spm_train)"
  node -e '
    const fs = require("fs");
    const out = [];
    for (const line of fs.readFileSync(process.argv[1], "utf8").trim().split("\n"))
      for (const s of JSON.parse(line).text.split(/(?<=[.!?])\s+|\n+/)) if (s.trim()) out.push(s.trim());
    fs.writeFileSync(process.argv[2], out.join("\n") + "\n");' "$DATA_DIR/sotu.jsonl" "$DATA_DIR/sotu_sentences.txt"
  spm_train --input="$DATA_DIR/sotu_sentences.txt" --model_prefix="${SP_MODEL%.model}" \
    --vocab_size=4096 --model_type=unigram --input_sentence_size=300000 \
    --shuffle_input_sentence=true --minloglevel=1
fi
PREFIX="$DATA_DIR/sotu_sp4k"
if [[ ! -f ${PREFIX}_text_document.idx || $SP_MODEL -nt ${PREFIX}_text_document.idx ]]; then
  echo "demo: tokenizing the State of the Union corpus with it"
  "$MEGATRON" preprocess --input "$DATA_DIR/sotu.jsonl" --output-prefix "$PREFIX" \
    --tokenizer-type SentencePieceTokenizer --tokenizer-model "$SP_MODEL" --append-eod --workers 2
fi

# bf16 pays where the CPU multiplies bf16 natively (AMX or AVX512-BF16, via oneDNN); elsewhere
# bf16 GEMMs are widened to f32 and cost more than plain f32, so the demo trains in f32 there.
PRECISION=()
grep -qE 'amx_bf16|avx512_bf16' /proc/cpuinfo && PRECISION=(--bf16)

rm -rf "$OUT"
mkdir -p "$OUT"
mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$MEGATRON" pretrain-gpt \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 \
  --max-position-embeddings 256 --micro-batch-size 16 --global-batch-size 16 \
  --train-iters "$ITERS" --exit-duration-in-mins "$MINUTES" --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine \
  --lr-warmup-fraction 0.02 --weight-decay 0.1 --clip-grad 1.0 "${PRECISION[@]}" \
  --tensor-model-parallel-size 2 \
  --data-path "${PREFIX}_text_document" --split 949,50,1 \
  --tokenizer-type SentencePieceTokenizer --tokenizer-model "$SP_MODEL" \
  --log-interval 20 --eval-interval 100 --eval-iters 8 --save "$OUT/checkpoints" \
  --metrics-file "$OUT/metrics.jsonl" --tensorboard-dir "$OUT/tensorboard" | tee "$OUT/train.log"

node -e '
  const v = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
              .map(JSON.parse).filter(r => r.type === "validation");
  const last = v[v.length - 1];
  console.log(`demo: final validation loss ${last.lm_loss.toFixed(4)}, ` +
              `perplexity ${last.lm_loss_ppl.toFixed(2)} (iteration ${last.iteration}; ` +
              `first evaluation: perplexity ${v[0].lm_loss_ppl.toFixed(2)})`);' "$OUT/metrics.jsonl"

# The model writes: three prompts continued with nucleus sampling at TP 2 (the checkpoint
# records its tokenizer), each printed as it is generated.
echo "demo: what the model writes (megatron generate, top-p 0.9, temperature 0.8, TP 2):"
mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$MEGATRON" generate \
  --load "$OUT/checkpoints" --tokens-to-generate 48 --top-p 0.9 --temperature 0.8 --seed 1 \
  --prompt "The Congress of the United States" --prompt "Our economy" \
  --prompt "I have the honor to" --output-file "$OUT/generated.jsonl" 2>/dev/null
echo "demo: talk to it in a browser: $MEGATRON serve --load $OUT/checkpoints  (then open"
echo "      http://127.0.0.1:5000/), or from a terminal: $MEGATRON generate --load $OUT/checkpoints"
