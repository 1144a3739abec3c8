#!/usr/bin/env bash
# Pipeline bubble, measured side by side in one run: the same GPT step (8 layers, h 256, s 128,
# global batch 16 of micro-batches 1 or 4) at PP 2 with 1F1B and m = 4 or 16 micro-batches, and
# interleaved with 2 chunks per rank at m = 16, on 2 processes (one per core of this machine).
# `megatron bench --mode step` reports the share of the step each rank spends waiting for a
# stage input or gradient (bubble + transfers + stage imbalance) beside the ideal bubble
# (p-1)/(v·m+p-1). Usage: bench/pipeline_bubble.sh [MEGATRON_BINARY]
set -euo pipefail
BIN=${1:-build/megatron}
export OMP_NUM_THREADS=1
common=(bench --mode step --num-layers 8 --hidden-size 256 --num-attention-heads 8
        --seq-length 128 --vocab-size 1024 --global-batch-size 16 --warmup-iters 2
        --timed-iters 4)
run() {
  echo "== $*"
  mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$BIN" "${common[@]}" "$@" \
    2>&1 | grep -E '^step benchmark|step time|pipeline wait'
}
run --pipeline-model-parallel-size 1 --micro-batch-size 4
run --pipeline-model-parallel-size 2 --micro-batch-size 4
run --pipeline-model-parallel-size 2 --micro-batch-size 1
run --pipeline-model-parallel-size 2 --micro-batch-size 1 --num-layers-per-virtual-pipeline-stage 2
