#!/usr/bin/env bash
# `megatron plan` against measured mixture-of-experts runs (issue 42, item 5): a tiny MoE GPT
# trains a few iterations with `megatron pretrain-gpt` at expert parallelism 1 (1 process), 2
# (2 processes, DP 2 x EP 2) and 2 with TP 2 (4 processes: TP 2 x DP 2, EP 2, ETP = TP), each
# process 1 thread: peak RSS per rank (/usr/bin/time %M) and rank 0's memory report (the tensors
# allocated after the last iteration), beside `megatron plan`'s figures for the same flags.
# OUT_DIR/moe_measured.json holds them for tests/unit/plan_validation_test.cpp (committed as
# bench/plan_validation/moe_measured.json).
#
#   bash bench/plan_validation_moe.sh [OUT_DIR]           (default: /tmp/plan_validation_moe)
#   PREDICT_ONLY=1 bash bench/plan_validation_moe.sh OUT  (the plans of the runs in OUT)
#
# The model: 2 layers, h 128, 4 heads, s 256, micro-batch 4, 8 experts of width 512, top 2
# (dropless), the aux loss, mock data, f32.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/bench/memory_runs.bash"  # four_device_machine_file, write_measured_memory
BIN="${MEGATRON_BINARY:-$ROOT/build/megatron}"
OUT="${1:-/tmp/plan_validation_moe}"
ITERS="${ITERS:-3}"
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1)

MODEL=(--num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 256
       --max-position-embeddings 256 --vocab-size 512 --micro-batch-size 4
       --num-experts 8 --moe-ffn-hidden-size 512 --moe-router-topk 2
       --moe-router-load-balancing-type aux_loss --moe-aux-loss-coeff 0.01)

# The 2 x 1 machine file with 4 devices on the node, for the plan of the 4-process run (its
# memory only: 4 processes share the 2 cores).
four_device_machine_file "$OUT/cpu_dev_4x1.json"

# NAME NPROCS layout flags...
RUNS=("ep1 1 --global-batch-size 4"
      "ep2 2 --global-batch-size 8 --expert-model-parallel-size 2"
      "ep2_tp2 4 --global-batch-size 8 --expert-model-parallel-size 2 --tensor-model-parallel-size 2")

for spec in "${RUNS[@]}"; do
  read -r name np layout <<< "$spec"
  read -ra LAYOUT <<< "$layout"
  if [[ -z "${PREDICT_ONLY:-}" ]]; then
    echo "== $name: $np processes x 1 thread"
    "${MPI[@]}" -np "$np" bash -c \
      '/usr/bin/time -f "%M" -o "$0.rss.$OMPI_COMM_WORLD_RANK" "$@"' "$OUT/$name" "$BIN" \
      pretrain-gpt "${MODEL[@]}" "${LAYOUT[@]}" --train-iters "$ITERS" --lr 1e-3 --mock-data \
      --log-interval 1 --eval-iters 0 --seed 7 > "$OUT/$name.log" 2>&1
  fi
  machine="$ROOT/examples/machines/cpu_dev_2x1.json"
  [[ "$np" == 4 ]] && machine="$OUT/cpu_dev_4x1.json"
  "$BIN" plan --machine "$machine" "${MODEL[@]}" "${LAYOUT[@]}" --world-size "$np" \
    > "$OUT/plan_$name.plan"
  echo "== $name: peak RSS per rank (MB):" \
    "$(for f in "$OUT/$name".rss.*; do printf '%.1f ' "$(awk '{print $1 / 1024}' "$f")"; done)"
  grep -E "Theoretical memory|memory \(MB\)" "$OUT/$name.log" | sed 's/^/   /' | cut -c1-200
  grep -E "^  total|activations|workspace|experts|MoE layer" "$OUT/plan_$name.plan" |
    sed 's/^/   plan: /'
done

# moe_measured.json: each run's peak RSS per rank and rank 0's memory report after the last
# iteration.
write_measured_memory "$OUT" "ep*.log" moe_measured.json
cat "$OUT/moe_measured.json"
