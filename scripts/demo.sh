#!/usr/bin/env bash
# The README's main job: set up and build, fetch the data, tokenize the State of the Union
# corpus with GPT-2 BPE (cached), and pretrain a small GPT (4 layers, h 256, 8 heads, s 256)
# on 2 processes with tensor parallelism 2 (bf16 where the CPU has AMX/AVX512-BF16) for a few minutes (--exit-duration-in-mins),
# evaluating as it goes; prints the final validation perplexity. About 10 minutes on 2 cores
# once the build is done.
#
# Environment: MEGATRON_DATA_DIR (data cache, default ~/.cache/megatron-cpp),
# MEGATRON_BUILD_DIR (default build/), DEMO_MINUTES (training time, default 6), DEMO_ITERS
# (iterations at most, default 400), DEMO_OUT (run directory,
# default demo_run/ — checkpoints, metrics.jsonl, TensorBoard events).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_DIR="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
BUILD="${MEGATRON_BUILD_DIR:-$ROOT/build}"
OUT="${DEMO_OUT:-$ROOT/demo_run}"
ITERS="${DEMO_ITERS:-400}"
MINUTES="${DEMO_MINUTES:-6}"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # 2 processes share the 2 cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

"$ROOT/scripts/setup.sh"
"$ROOT/scripts/fetch_data.sh"
MEGATRON="$BUILD/megatron"

# Tokenize once: the .bin/.idx are rebuilt only when the corpus is newer than them.
PREFIX="$DATA_DIR/sotu_gpt2"
if [[ ! -f ${PREFIX}_text_document.idx || $DATA_DIR/sotu.jsonl -nt ${PREFIX}_text_document.idx ]]; then
  echo "demo: tokenizing the State of the Union corpus with GPT-2 BPE"
  "$MEGATRON" preprocess --input "$DATA_DIR/sotu.jsonl" --output-prefix "$PREFIX" \
    --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json" \
    --merge-file "$DATA_DIR/gpt2-merges.txt" --append-eod --workers 2
fi

# bf16 pays where the CPU multiplies bf16 natively (AMX or AVX512-BF16, via oneDNN); elsewhere
# bf16 GEMMs are widened to f32 and cost more than plain f32, so the demo trains in f32 there.
PRECISION=()
grep -qE 'amx_bf16|avx512_bf16' /proc/cpuinfo && PRECISION=(--bf16)

rm -rf "$OUT"
mkdir -p "$OUT"
mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$MEGATRON" pretrain-gpt \
  --num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 \
  --max-position-embeddings 256 --micro-batch-size 4 --global-batch-size 8 \
  --train-iters "$ITERS" --exit-duration-in-mins "$MINUTES" --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine \
  --lr-warmup-fraction 0.05 --weight-decay 0.1 --clip-grad 1.0 "${PRECISION[@]}" \
  --tensor-model-parallel-size 2 \
  --data-path "${PREFIX}_text_document" --split 949,50,1 \
  --tokenizer-type GPT2BPETokenizer --vocab-file "$DATA_DIR/gpt2-vocab.json" \
  --merge-file "$DATA_DIR/gpt2-merges.txt" \
  --log-interval 10 --eval-interval 25 --eval-iters 4 --save "$OUT/checkpoints" \
  --metrics-file "$OUT/metrics.jsonl" --tensorboard-dir "$OUT/tensorboard" | tee "$OUT/train.log"

node -e '
  const v = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
              .map(JSON.parse).filter(r => r.type === "validation");
  const last = v[v.length - 1];
  console.log(`demo: final validation loss ${last.lm_loss.toFixed(4)}, ` +
              `perplexity ${last.lm_loss_ppl.toFixed(2)} (iteration ${last.iteration}; ` +
              `first evaluation: perplexity ${v[0].lm_loss_ppl.toFixed(2)})`);' "$OUT/metrics.jsonl"
