# Sourced (never run; the .bash suffix keeps it out of the e2e tests CMake registers) by the
# layout-invariance scripts that train one tiny GPT at several TP×PP×DP layouts and compare the
# metrics: pipeline_layout_invariance.sh, sequence_parallel.sh, overlap_grad_reduce.sh,
# pipeline_llama.sh. Their runs must differ only in the layout and the flags each passes, so the
# model, data, batch, optimizer and seed live here, once.
#
# Needs MEGATRON_BINARY and MEGATRON_SOURCE_DIR, and `set -euo pipefail` in the sourcing script.
# Sets WORK (a scratch directory, removed at exit), OMP_NUM_THREADS=1, CHECK (compare_metrics.js)
# and TINY_LLAMA (the Llama options at this size: RoPE, RMSNorm, SwiGLU with FFN 96, 2 KV groups,
# untied output layer, no linear biases).
# Defines:
#   run NAME NP TP PP [FLAGS...]
#     trains 4 layers, hidden 64, 4 heads, sequence 32, mock data, vocabulary 128, global batch 8
#     of micro-batches of 2, seed 42, logging every iteration, at tensor-parallel size TP and
#     pipeline-parallel size PP on NP ranks, with the script's TINY_GPT_FLAGS array (its
#     iterations and validation: set it before the first run) and then FLAGS; writes
#     $WORK/NAME.jsonl (metrics) and $WORK/NAME.log, and on failure prints the log and exits 1.
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
TINY_LLAMA=(--ffn-hidden-size 96 --position-embedding-type rope --normalization RMSNorm --swiglu
  --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights
  --disable-bias-linear)

run() {
  local name=$1 np=$2 tp=$3 pp=$4
  shift 4
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size 2 --global-batch-size 8 \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
    --clip-grad 1.0 --seed 42 --tensor-model-parallel-size "$tp" \
    --pipeline-model-parallel-size "$pp" --log-interval 1 --metrics-file "$WORK/$name.jsonl" \
    "${TINY_GPT_FLAGS[@]}" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: run $name"; exit 1; }
}
