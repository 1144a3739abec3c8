#!/usr/bin/env bash
# Context parallelism on this 2-core machine (issue 36), two parts:
#
#   bash bench/context_parallel.sh step   [OUT_DIR]   the benchmark: a tiny GPT at
#       sequence 16,384 (the widths below, learned positions: the step benchmark's flags), CP 2 over 2 processes x 1 thread against CP 1 in 1 process x 2 threads,
#       alternated (A B, ROUNDS times, default 2) in one run with `megatron bench --mode step`:
#       the step time (ITERS timed steps after one warm-up), the communication share and the
#       ring's wait share (the K/V and dK/dV transfers its blocks' compute did not hide), peak
#       RSS per rank, and `megatron plan`'s figures beside them.
#   bash bench/context_parallel.sh memory [OUT_DIR]   the long-context run: the same model at
#       sequence 8,192 and 32,768 (SEQS) trains a few iterations at CP 4 on 4 processes and at
#       CP 1 in one process (both under mpirun, OMP_NUM_THREADS=1): peak RSS per rank
#       (/usr/bin/time %M), the memory report and the theoretical memory line of each log, and
#       `megatron plan`'s figures; OUT_DIR/context_parallel_measured.json holds them for plan_validation_test.
#       PREDICT_ONLY=1: the plans and the summary of the runs already in OUT_DIR.
#
# The planner's machine files are the shipped ones of this machine (examples/machines/
# cpu_dev_1x2.json, cpu_dev_2x1.json). Default OUT_DIR: /tmp/context_parallel.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/bench/memory_runs.bash"  # four_device_machine_file, write_measured_memory
BIN="${MEGATRON_BINARY:-$ROOT/build/megatron}"
PART="${1:?usage: bench/context_parallel.sh step|memory [OUT_DIR]}"
OUT="${2:-/tmp/context_parallel}"
ITERS="${ITERS:-3}"
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to none)

# The tiny Llama-family model of bench/RESULTS.md's CP memory table: 2 layers, h 64, 4 heads in
# 2 KV groups, RoPE, SwiGLU, RMSNorm, no biases, untied output layer, fused attention.
MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --group-query-attention
       --num-query-groups 2 --ffn-hidden-size 96 --swiglu --normalization RMSNorm
       --position-embedding-type rope --disable-bias-linear --untie-embeddings-and-output-weights
       --use-flash-attn --vocab-size 512 --micro-batch-size 1 --global-batch-size 1)

# The 2 x 1 machine file with 4 devices on the node, for the memory plans of the CP 4 runs (4
# processes on the 2 cores; its times would not describe them and are not used).
four_device_machine_file "$OUT/cpu_dev_4x1.json"

# plan NAME MACHINE SEQ CP: `megatron plan` of the run (text in NAME.plan).
plan() {
  local name="$1" machine="$2" seq="$3" cp="$4"
  [[ -f "$OUT/$machine" ]] && machine="$OUT/$machine" || machine="$ROOT/examples/machines/$machine"
  "$BIN" plan --machine "$machine" "${MODEL[@]}" --seq-length "$seq" \
    --max-position-embeddings "$seq" --context-parallel-size "$cp" --world-size "$cp" \
    > "$OUT/$name.plan"
}

# rss NAME: the peak RSS of each rank, MB.
rss() {
  local f
  for f in "$OUT/$1".rss.*; do printf '%.1f ' "$(awk '{print $1 / 1024}' "$f")"; done
}

if [[ "$PART" == step ]]; then
  SEQ=16384
  # `bench --mode step` takes the GPT flags only (no Llama options): the same widths with
  # learned positions, 4 KV heads and a GeLU MLP of 4h.
  STEP_MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --use-flash-attn
              --vocab-size 512 --micro-batch-size 1 --global-batch-size 1)
  STEP=(bench --mode step "${STEP_MODEL[@]}" --seq-length "$SEQ" --max-position-embeddings "$SEQ"
        --warmup-iters 1 --timed-iters "$ITERS")
  echo "load before: $(uptime)"
  for round in $(seq "${ROUNDS:-2}"); do
    name="cp1_1x2_r$round"
    echo "== $name: CP 1, 1 process x 2 threads"
    OMP_NUM_THREADS=2 /usr/bin/time -f "%M" -o "$OUT/$name.rss.0" "$BIN" "${STEP[@]}" \
      > "$OUT/$name.log" 2>&1
    grep -E "step time|share" "$OUT/$name.log" | sed 's/^/   /'
    echo "   peak RSS (MB): $(rss "$name")"
    name="cp2_2x1_r$round"
    echo "== $name: CP 2, 2 processes x 1 thread"
    "${MPI[@]}" -x OMP_NUM_THREADS=1 -np 2 bash -c \
      '/usr/bin/time -f "%M" -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$OUT/$name" "$BIN" \
      "${STEP[@]}" --context-parallel-size 2 > "$OUT/$name.log" 2>&1
    grep -E "step time|share" "$OUT/$name.log" | sed 's/^/   /'
    echo "   peak RSS (MB): $(rss "$name")"
  done
  echo "load after: $(uptime)"
  MODEL=("${STEP_MODEL[@]}")
  plan plan_cp1 cpu_dev_1x2.json "$SEQ" 1
  plan plan_cp2 cpu_dev_2x1.json "$SEQ" 2
  for p in plan_cp1 plan_cp2; do
    echo "== $p"
    grep -E "^  total|context-parallel attention|CP ring|^  step|^  pipeline" "$OUT/$p.plan" |
      sed 's/^/   /'
  done
elif [[ "$PART" == memory ]]; then
  SEQS=(${SEQS:-8192 32768})
  if [[ -z "${PREDICT_ONLY:-}" ]]; then
    echo "load before: $(uptime)"
    for SEQ in "${SEQS[@]}"; do
      TRAIN=(pretrain-gpt "${MODEL[@]}" --seq-length "$SEQ" --max-position-embeddings "$SEQ"
             --train-iters "$ITERS" --lr 1e-3 --mock-data --log-interval 1 --eval-iters 0
             --seed 7)
      echo "== cp4_s$SEQ: CP 4, 4 processes x 1 thread"
      "${MPI[@]}" -x OMP_NUM_THREADS=1 -np 4 bash -c \
        '/usr/bin/time -f "%M" -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$OUT/cp4_s$SEQ" "$BIN" \
        "${TRAIN[@]}" --context-parallel-size 4 > "$OUT/cp4_s$SEQ.log" 2>&1
      echo "== cp1_s$SEQ: CP 1, 1 process x 1 thread"
      "${MPI[@]}" -x OMP_NUM_THREADS=1 -np 1 bash -c \
        '/usr/bin/time -f "%M" -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$OUT/cp1_s$SEQ" "$BIN" \
        "${TRAIN[@]}" > "$OUT/cp1_s$SEQ.log" 2>&1
    done
    echo "load after: $(uptime)"
  fi
  for SEQ in "${SEQS[@]}"; do
    plan plan_cp1_s$SEQ cpu_dev_1x2.json "$SEQ" 1
    plan plan_cp4_s$SEQ cpu_dev_4x1.json "$SEQ" 4
    for run in cp1_s$SEQ cp4_s$SEQ; do
      echo "== $run: peak RSS per rank (MB): $(rss "$run")"
      grep -E "lm loss|Theoretical memory|memory \(MB\)" "$OUT/$run.log" | sed 's/^/   /' |
        cut -c1-220
      grep -E "^  total|activations|workspace" "$OUT/plan_$run.plan" | sed 's/^/   plan: /'
    done
  done
  # context_parallel_measured.json (tests/unit/plan_validation_test.cpp reads it from
  # bench/plan_validation/): each run's peak RSS per rank, and rank 0's memory report after the
  # last iteration.
  write_measured_memory "$OUT" "cp[0-9]_s*.log" context_parallel_measured.json
  cat "$OUT/context_parallel_measured.json"
else
  echo "unknown part '$PART': give step or memory" >&2
  exit 2
fi
