#!/usr/bin/env bash
# The LayerNorm-placement study (docs/bert_ln_study.md): trains a small and a larger BERT in
# both LayerNorm orders — pre-LN (Megatron-LM's rearrangement) and post-LN (the original
# BERT) — on the State of the Union corpus (sentence-split, BERT uncased WordPiece) for the
# same number of steps with the same data, seed and schedule, and writes the four validation
# loss curves:
#   OUT/{small,large}_{pre,post}.jsonl   --metrics-file of each run
#   OUT/curves.svg                       `megatron plot` of the four runs: training and
#                                        validation lm and sop loss
# Budget: ≈ 15 minutes on 2 cores. Usage: examples/ln_placement_study.sh [OUT] (default
# docs/bert_ln_study). Needs a build (scripts/setup.sh) and scripts/fetch_data.sh's files.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${MEGATRON_BINARY:-$ROOT/build/megatron}"
DATA="${MEGATRON_DATA_DIR:-$HOME/.cache/megatron-cpp}"
OUT="${1:-$ROOT/docs/bert_ln_study}"
ITERS="${STUDY_ITERS:-120}"
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

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
run() {  # name layers hidden heads [--post-layernorm]
  local name=$1 layers=$2 hidden=$3 heads=$4
  shift 4
  rm -f "$OUT/$name.jsonl"
  echo "== $name: $layers layers, hidden $hidden, $* ($(date +%T))"
  mpirun --oversubscribe --bind-to none -np 2 "$BIN" pretrain-bert \
    --tensor-model-parallel-size 2 \
    --num-layers "$layers" --hidden-size "$hidden" --num-attention-heads "$heads" \
    --seq-length 128 --max-position-embeddings 128 \
    --micro-batch-size 8 --global-batch-size 8 --train-iters "$ITERS" \
    --lr 1e-3 --min-lr 1e-5 --lr-decay-style linear --lr-warmup-fraction 0.1 \
    --weight-decay 0.01 --clip-grad 1.0 --seed 1234 \
    --data-path "${PREFIX}_text_sentence" --vocab-file "$DATA/bert-base-uncased-vocab.txt" \
    --split 949,50,1 --log-interval 10 --eval-interval 20 --eval-iters 4 \
    --metrics-file "$OUT/$name.jsonl" "$@" | grep -E "validation loss at|iteration +[0-9]+/" || true
}
run small_pre 2 128 4
run small_post 2 128 4 --post-layernorm
run large_pre 6 256 8
run large_post 6 256 8 --post-layernorm

RUNS=(small_pre small_post large_pre large_post)
FILES=()
for run in "${RUNS[@]}"; do FILES+=("$OUT/$run.jsonl"); done
"$BIN" plot "${FILES[@]}" --output "$OUT/curves.svg" --label "${RUNS[@]}" --no-text \
  --title "BERT LayerNorm placement: small (2 x 128) and large (6 x 256), pre-LN vs post-LN"
