#!/usr/bin/env bash
# The LayerNorm-placement study over depth (docs/bert_ln_study.md, "Depth"): narrow BERTs
# (h 64, 4 heads, s 64) at depths 3, 6, 12 and 24, in both LayerNorm orders, over several
# seeds. Each run trains STUDY_ITERS iterations (default 150) at constant learning rate
# STUDY_LR (default 1e-3, no warm-up: the regime where Xiong et al. 2020 find post-LN needs
# warm-up) and logs each layer's gradient norm at initialisation (--log-layer-grad-norms).
#   OUT/L{depth}_{pre,post}_s{seed}.jsonl   --metrics-file of each run
#   OUT/init/L{depth}_{pre,post}_s{seed}.jsonl  one-iteration runs at a Xavier-scale init
#                                            (std 1/sqrt(h), the init of Xiong et al.'s
#                                            analysis) instead of Megatron's std 0.02
#   OUT/depth.svg                            final validation loss against depth (mean and
#                                            range over seeds) and gradient norm per layer at
#                                            initialisation for both inits, one line per order
# Sizes are flags: STUDY_DEPTHS="12 24 48" STUDY_HIDDEN=1024 STUDY_HEADS=16 runs the same study
# at other sizes (on a GPU add --device cuda through STUDY_EXTRA).
# STUDY_INIT_ONLY=1 skips the training runs (keeping those already in OUT).
# Usage: examples/ln_depth_study.sh [OUT] (default docs/bert_ln_study/depth). Needs a build
# (scripts/setup.sh) and scripts/fetch_data.sh's files.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${MEGATRON_BINARY:-$ROOT/build/megatron}"
DATA="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
OUT="${1:-$ROOT/docs/bert_ln_study/depth}"
ITERS="${STUDY_ITERS:-150}"
LR="${STUDY_LR:-1e-3}"
DEPTHS=(${STUDY_DEPTHS:-3 6 12 24})
SEEDS=(${STUDY_SEEDS:-1 2 3})
HIDDEN="${STUDY_HIDDEN:-64}"
HEADS="${STUDY_HEADS:-4}"
read -r -a EXTRA <<<"${STUDY_EXTRA:-}"
mkdir -p "$OUT"
for f in sotu.jsonl bert-base-uncased-vocab.txt; do
  [[ -f "$DATA/$f" ]] || { echo "missing $DATA/$f: run scripts/fetch_data.sh" >&2; exit 1; }
done

PREFIX="$DATA/sotu_bert_uncased"
if [[ ! -f "${PREFIX}_text_sentence.idx" ]]; then
  "$BIN" preprocess --input "$DATA/sotu.jsonl" --tokenizer-type BertWordPieceLowerCase \
    --vocab-file "$DATA/bert-base-uncased-vocab.txt" --split-sentences --workers 2 \
    --output-prefix "$PREFIX"
fi

# One process per run, two runs at a time (one per core).
export OMP_NUM_THREADS=1
run() {  # dir iterations depth order seed [flags...]
  local dir=$1 iters=$2 depth=$3 order=$4 seed=$5 name="L$3_$4_s$5"
  shift 5
  local post=()
  [[ $order == post ]] && post=(--post-layernorm)
  rm -f "$dir/$name.jsonl"
  # A run that diverges (the divergence guard stops it) is a result, not a failure.
  "$BIN" pretrain-bert --num-layers "$depth" --hidden-size "$HIDDEN" \
    --num-attention-heads "$HEADS" --seq-length 64 --max-position-embeddings 64 \
    --micro-batch-size 16 --global-batch-size 16 --train-iters "$iters" \
    --lr "$LR" --lr-decay-style constant --weight-decay 0.01 --clip-grad 1.0 --seed "$seed" \
    --data-path "${PREFIX}_text_sentence" --vocab-file "$DATA/bert-base-uncased-vocab.txt" \
    --split 949,50,1 --log-interval 25 --eval-interval "$iters" --eval-iters 8 \
    --metrics-file "$dir/$name.jsonl" --log-layer-grad-norms "${post[@]}" "$@" \
    "${EXTRA[@]}" >"$dir/$name.log" 2>&1 || echo "== $name stopped early (see $dir/$name.log)"
  echo "== $dir/$name done ($(date +%T))"
}
if [[ -z "${STUDY_INIT_ONLY:-}" ]]; then
  for depth in "${DEPTHS[@]}"; do
    for seed in "${SEEDS[@]}"; do
      run "$OUT" "$ITERS" "$depth" pre "$seed" &
      run "$OUT" "$ITERS" "$depth" post "$seed" &
      wait
    done
  done
fi
# The gradients at initialisation under a Xavier-scale init: one iteration, no evaluation.
mkdir -p "$OUT/init"
XAVIER_STD=$(awk -v h="$HIDDEN" 'BEGIN { printf "%.6g", 1 / sqrt(h) }')
for depth in "${DEPTHS[@]}"; do
  for seed in "${SEEDS[@]}"; do
    run "$OUT/init" 1 "$depth" pre "$seed" --init-method-std "$XAVIER_STD" &
    run "$OUT/init" 1 "$depth" post "$seed" --init-method-std "$XAVIER_STD" &
    wait
  done
done
node "$ROOT/examples/ln_depth_figure.js" "$OUT" "$OUT/depth.svg" "$XAVIER_STD"
