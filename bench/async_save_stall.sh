#!/usr/bin/env bash
# How long does a checkpoint stop training, with and without --async-save? (issue 39) One
# process, a GPT of 6 layers, h 512, V 8192 (23M parameters: a 0.28 GB checkpoint of f32
# weights and Adam's two moments), saving every 3rd of 12 iterations into a directory on disk
# (DIR, default a fresh one under /var/tmp), sync and async alternated ROUNDS times in one run.
# A save runs after its iteration's log line, so it lands in the next iteration's "elapsed time
# per iteration": the stall is the mean of iterations 4, 7, 10 minus the median of the others
# (iterations 2-12). Prints each run's stall and step time and the ratio async / sync.
# Usage: [ROUNDS=2] [DIR=/var/tmp] bench/async_save_stall.sh [MEGATRON_BINARY]
set -euo pipefail
BIN=${1:-build/megatron}
ROUNDS=${ROUNDS:-2}
WORK="$(mktemp -d "${DIR:-/var/tmp}/async_save_stall.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
common=(pretrain-gpt --mock-data --num-layers 6 --hidden-size 512 --num-attention-heads 8
        --seq-length 128 --max-position-embeddings 128 --vocab-size 8192
        --micro-batch-size 2 --global-batch-size 2 --train-iters 12 --lr 1e-4
        --log-interval 1 --eval-iters 0 --eval-interval 1000 --save-interval 3)
# stall LOG: "STALL_MS STEP_MS" from the per-iteration elapsed times.
stall() {
  local times med
  times=$(sed -n 's/.*iteration *\([0-9]*\)\/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1 \2/p' "$1")
  med=$(awk '$1 >= 2 && $1 % 3 != 1 { print $2 }' <<< "$times" | sort -n |
    awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  awk -v med="$med" '$1 >= 2 && $1 % 3 == 1 { s += $2; n++ }
    END { printf "%.0f %.0f\n", s / n - med, med }' <<< "$times"
}
declare -A total
for round in $(seq "$ROUNDS"); do
  for mode in sync async; do
    flags=()
    [[ $mode == async ]] && flags=(--async-save)
    rm -rf "$WORK/ck"
    "$BIN" "${common[@]}" --save "$WORK/ck" "${flags[@]}" > "$WORK/$mode.log" 2>&1 ||
      { cat "$WORK/$mode.log"; exit 1; }
    read -r ms step <<< "$(stall "$WORK/$mode.log")"
    echo "round $round $mode: stall per save $ms ms (step $step ms)"
    total[$mode]=$(( ${total[$mode]:-0} + ms ))
  done
done
awk -v a="${total[async]}" -v s="${total[sync]}" 'BEGIN { printf "async / sync stall: %.3f\n", a / s }'
