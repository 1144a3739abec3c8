#!/usr/bin/env bash
# Issue 19's memory check at the layouts bench/plan_validation.sh does not run: pipeline
# parallelism (1F1B and interleaved), the distributed optimizer (fp32, and bf16 with its sharded
# fp32 master), sequence parallelism with selective recompute, and the Llama-family options. Peak RSS (/usr/bin/time
# %M, the largest over the ranks) of short runs of a small GPT, beside a one-layer run of the same
# widths whose RSS minus its predicted memory is the process baseline (as in plan_validation.sh).
# The baseline run keeps the hidden size, vocabulary and micro-batch of the measured runs so that
# its GEMMs touch as much of the BLAS library's packing buffers as theirs do (OpenBLAS's are a
# 128 MiB mapping per thread, of which a GEMM touches a panel set by its K and N: ~50 MiB for
# the h 512 x 50,304 logits here, nothing for a tiny model's); the planner does not model them. Writes
# OUT_DIR/memory_measured.json, the file tests/unit/plan_validation_test.cpp reads from
# bench/plan_validation/. Step times are not compared here (3 iterations, RSS only).
#
#   bash bench/plan_memory.sh [OUT_DIR]     (default: /tmp/plan_memory)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${MEGATRON_BINARY:-$ROOT/build/megatron}"
OUT="${1:-/tmp/plan_memory}"
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1)

COMMON=(--seq-length 128 --max-position-embeddings 128 --global-batch-size 8 --lr 1e-4
        --mock-data --vocab-size 50257 --log-interval 1 --eval-iters 0 --train-iters 3)
WIDTHS=(--hidden-size 512 --num-attention-heads 8 --micro-batch-size 2)
BASE=(--num-layers 1 "${WIDTHS[@]}")
SMALL=(--num-layers 4 "${WIDTHS[@]}")
LLAMA=(--swiglu --ffn-hidden-size 1024 --group-query-attention --num-query-groups 2
       --normalization RMSNorm --position-embedding-type rope --disable-bias-linear
       --untie-embeddings-and-output-weights)

# run NAME NPROCS flags...: peak RSS (kB) per rank in NAME.rss.RANK, log in NAME.log.
run() {
  local name="$1" np="$2"
  shift 2
  echo "== $name ($np processes)"
  "${MPI[@]}" -np "$np" bash -c \
    '/usr/bin/time -f "%M" -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$OUT/$name" "$BIN" \
    pretrain-gpt "${COMMON[@]}" "$@" > "$OUT/$name.log" 2>&1
  echo "   peak RSS $(sort -n "$OUT"/$name.rss.* | tail -1) kB"
}

run mem_base 1 "${BASE[@]}"
run mem_pp2 2 "${SMALL[@]}" --pipeline-model-parallel-size 2
run mem_pp2_interleaved 2 "${SMALL[@]}" --pipeline-model-parallel-size 2 \
  --num-layers-per-virtual-pipeline-stage 1
run mem_dp2_distopt 2 "${SMALL[@]}" --use-distributed-optimizer
run mem_dp4_distopt 4 "${SMALL[@]}" --use-distributed-optimizer
run mem_dp2_distopt_bf16 2 "${SMALL[@]}" --use-distributed-optimizer --bf16
run mem_llama_tp2 2 "${SMALL[@]}" "${LLAMA[@]}" --tensor-model-parallel-size 2
run mem_sp_tp2 2 "${SMALL[@]}" --tensor-model-parallel-size 2 --sequence-parallel \
  --recompute-granularity selective

node -e '
  const fs = require("fs");
  const out = process.argv[1];
  const runs = {};
  for (const name of ["mem_base", "mem_pp2", "mem_pp2_interleaved", "mem_dp2_distopt",
                      "mem_dp4_distopt", "mem_dp2_distopt_bf16", "mem_llama_tp2", "mem_sp_tp2"]) {
    const rss = fs.readdirSync(out).filter((f) => f.startsWith(name + ".rss."))
      .map((f) => parseFloat(fs.readFileSync(`${out}/${f}`, "utf8")));
    runs[name] = {peak_rss_kb: Math.max(...rss), rank_rss_kb: rss};
  }
  fs.writeFileSync(`${out}/memory_measured.json`, JSON.stringify(runs, null, 1) + "\n");
' "$OUT"
cat "$OUT/memory_measured.json"
