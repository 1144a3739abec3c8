#!/usr/bin/env bash
# Graceful preemption (--exit-signal-handler, docs/reliability.md), under mpirun -np 2 at TP=2:
#  - SIGTERM sent from outside to every rank: the ranks finish the iteration, agree, save a
#    checkpoint, print one "exiting program after receiving SIGTERM" line and exit 0; the run
#    resumed from that checkpoint logs iterations bit-identical to an uninterrupted run;
#  - SIGINT sent to one rank only: every rank still stops after the same iteration and saves.
# No sleeping: the run's test hook (train/exit_signal.h) pauses the chosen ranks at the end of
# iteration 4 and hands the test their pids through a FIFO, so the signals arrive at a known
# iteration.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'exec 3>&- 2>/dev/null || true; rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2)
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32
      --micro-batch-size 2 --global-batch-size 4 --train-iters 8
      --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --seed 7
      --tensor-model-parallel-size 2 --log-interval 1 --eval-interval 100 --eval-iters 0)

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*.log; do [[ -f $f ]] && { echo "--- $f" >&2; tail -30 "$f" >&2; }; done
  exit 1
}

run() {  # run NAME FLAGS... (foreground)
  local name=$1
  shift
  timeout 300 "${MPIRUN[@]}" "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" \
    --metrics-file "$WORK/$name.jsonl" "$@" > "$WORK/$name.log" 2>&1 || fail "run $name"
}

# interrupted NAME SIGNAL PAUSED_RANKS FLAGS...: a run whose PAUSED_RANKS stop at the end of
# iteration 4 until SIGNAL reaches them; each of them is sent SIGNAL once it is paused.
interrupted() {
  local name=$1 signal=$2 ranks=$3
  shift 3
  local fifo="$WORK/$name.fifo"
  mkfifo "$fifo"
  exec 3<> "$fifo"  # read-write: never EOF while the ranks open and close it
  MEGATRON_TEST_PAUSE_AT_ITERATION=4 MEGATRON_TEST_PAUSE_RANKS=$ranks \
    MEGATRON_TEST_PAUSE_FIFO=$fifo \
    timeout 300 "${MPIRUN[@]}" -x MEGATRON_TEST_PAUSE_AT_ITERATION -x MEGATRON_TEST_PAUSE_RANKS \
    -x MEGATRON_TEST_PAUSE_FIFO "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" \
    --metrics-file "$WORK/$name.jsonl" --exit-signal-handler "$@" > "$WORK/$name.log" 2>&1 &
  local job=$! paused=0 rank pid
  while (( paused < $(tr ',' '\n' <<< "$ranks" | wc -l) )); do
    read -r -t 240 -u 3 rank pid || fail "$name: no rank paused at iteration 4"
    kill "-$signal" "$pid"
    paused=$((paused + 1))
  done
  local rc=0
  wait "$job" || rc=$?
  exec 3>&-
  [[ $rc -eq 0 ]] || fail "$name: exited $rc after SIG$signal, expected 0"
  [[ $(grep -c "exiting program after receiving SIG$signal at iteration 4" "$WORK/$name.log") -eq 1 ]] ||
    fail "$name: expected one 'exiting program after receiving SIG$signal at iteration 4' line"
}

run full
interrupted sigterm TERM 0,1 --save "$WORK/ck"
[[ $(cat "$WORK/ck/latest_checkpointed_iteration.txt") == 4 ]] || fail "sigterm: tracker is not 4"
$CHECK "$WORK/full.jsonl" "$WORK/sigterm.jsonl" --from 1 --to 4 --exact
grep -q '"iteration":5' "$WORK/sigterm.jsonl" && fail "sigterm: ran past iteration 4"
run resumed --load "$WORK/ck" --save "$WORK/ck"
echo "== resumed after SIGTERM, iterations 5-8, bit for bit"
$CHECK "$WORK/full.jsonl" "$WORK/resumed.jsonl" --from 5 --to 8 --exact

# The signal reaches rank 1 only: rank 0 learns of it at the same iteration.
interrupted sigint INT 1 --save "$WORK/ck_int"
[[ $(cat "$WORK/ck_int/latest_checkpointed_iteration.txt") == 4 ]] || fail "sigint: tracker is not 4"
[[ -d "$WORK/ck_int/iter_0000004/mp_rank_01" ]] || fail "sigint: rank 1's shard missing"
echo "exit_signal: OK"
