#!/usr/bin/env bash
# The --save lock (checkpoint/save_lock.h, docs/reliability.md), under mpirun -np 2:
#  1. while a job runs (paused by the test hook of train/exit_signal.h), a second
#     job on the same --save is refused at start, naming the first one's host and PID, and
#     writes nothing; the first job then saves and exits 0, and its lock file is gone;
#  2. a lock file left by a dead process of this host is taken over with a message;
#  3. one left by a job of another host is refused, with how to clear it;
#  4. a job whose lock file was taken over while it ran refuses to save its next checkpoint.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'exec 3>&- 2>/dev/null || true; rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
# This machine's name in the lock files, whatever its host name.
export MEGATRON_TEST_NODE_NAME=lock-test-host
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 -x MEGATRON_TEST_NODE_NAME)
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32
      --micro-batch-size 2 --global-batch-size 4 --train-iters 4
      --lr 1e-3 --seed 7 --tensor-model-parallel-size 2 --log-interval 1 --eval-iters 0)
LOCK="$WORK/ck/megatron-save.lock"

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*.log; do [[ -f $f ]] && { echo "--- $f" >&2; tail -30 "$f" >&2; }; done
  exit 1
}

run() {  # run NAME FLAGS...: sets $rc
  local name=$1
  shift
  rc=0
  timeout 300 "${MPIRUN[@]}" "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" "$@" \
    > "$WORK/$name.log" 2>&1 || rc=$?
}

# paused NAME ITERATION FLAGS...: starts a job in the background whose rank 0 stops at the
# end of ITERATION until signalled; sets $job (mpirun's pid) and $pid (rank 0's).
paused() {
  local name=$1 iteration=$2
  shift 2
  mkfifo "$WORK/$name.fifo"
  exec 3<> "$WORK/$name.fifo"
  MEGATRON_TEST_PAUSE_AT_ITERATION=$iteration MEGATRON_TEST_PAUSE_RANKS=0 \
    MEGATRON_TEST_PAUSE_FIFO="$WORK/$name.fifo" \
    timeout 300 "${MPIRUN[@]}" -x MEGATRON_TEST_PAUSE_AT_ITERATION -x MEGATRON_TEST_PAUSE_RANKS \
    -x MEGATRON_TEST_PAUSE_FIFO "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" \
    --exit-signal-handler "$@" > "$WORK/$name.log" 2>&1 &
  job=$!
  local rank
  read -r -t 240 -u 3 rank pid || fail "$name: rank 0 did not pause at iteration $iteration"
}

# 1. Two concurrent jobs on one --save: the second is refused.
paused first 2 --save "$WORK/ck"
grep -q "^host=lock-test-host pid=$pid start=" "$LOCK" || fail "the lock file does not name rank 0 ($pid): $(cat "$LOCK")"
run second --save "$WORK/ck"
[[ $rc -eq 1 ]] || fail "second: a job on a locked --save exited $rc"
grep -q "^error: --save '$WORK/ck' is in use by another job (host=lock-test-host pid=$pid start=[^;]*; lock file '$LOCK'): two jobs saving into one directory replace each other's checkpoints" \
  "$WORK/second.log" || fail "second: the refusal does not name the holder"
[[ $(grep -c '^error: ' "$WORK/second.log") -eq 1 ]] || fail "second: expected one error line"
! grep -q "iteration *1/" "$WORK/second.log" || fail "second: trained"
kill -TERM "$pid"
rc=0
wait "$job" || rc=$?
exec 3>&-
[[ $rc -eq 0 ]] || fail "first: exited $rc after SIGTERM"
[[ $(cat "$WORK/ck/latest_checkpointed_iteration.txt") == 2 ]] || fail "first: no checkpoint of iteration 2"
[[ ! -e $LOCK ]] || fail "first: the lock file outlived the job"
echo "ok: a second job on a running job's --save is refused"

# 2. A stale lock of this host (a killed job) is taken over.
echo "host=lock-test-host pid=999999999 start=2026-01-01T00:00:00Z" > "$LOCK"
run stale --load "$WORK/ck" --save "$WORK/ck"
[[ $rc -eq 0 ]] || fail "stale: exited $rc"
grep -q "WARNING: taking over the stale lock of --save '$WORK/ck' (host=lock-test-host pid=999999999 start=2026-01-01T00:00:00Z): that process no longer holds it" \
  "$WORK/stale.log" || fail "stale: no take-over message"
[[ $(cat "$WORK/ck/latest_checkpointed_iteration.txt") == 4 ]] || fail "stale: did not train"
[[ ! -e $LOCK ]] || fail "stale: the lock file outlived the job"
echo "ok: a stale lock of this host is taken over"

# 3. A lock file of another host is refused.
echo "host=elsewhere pid=12 start=2026-01-01T00:00:00Z" > "$LOCK"
run other_host --load "$WORK/ck" --save "$WORK/ck"
[[ $rc -eq 1 ]] || fail "other_host: exited $rc"
grep -q "^error: --save '$WORK/ck' has the lock file '$LOCK' of a job on another host (host=elsewhere pid=12 .*Remove the file once that job has ended" \
  "$WORK/other_host.log" || fail "other_host: the refusal does not explain"
rm "$LOCK"
echo "ok: a lock file of another host is refused"

# 4. The lock taken over while the job runs: its next save is refused.
paused taken 6 --load "$WORK/ck" --save "$WORK/ck" --train-iters 8 --save-interval 100 \
  --override-opt_param-scheduler
echo "host=intruder pid=1 start=2026-01-01T00:00:00Z" > "$LOCK"
kill -TERM "$pid"
rc=0
wait "$job" || rc=$?
exec 3>&-
[[ $rc -ne 0 ]] || fail "taken: saved although its lock was taken over"
grep -q "no longer names this job (host=lock-test-host pid=$pid .*it names host=intruder pid=1 .*Not saving this checkpoint" \
  "$WORK/taken.log" || fail "taken: the refused save is not explained"
[[ $(cat "$WORK/ck/latest_checkpointed_iteration.txt") == 4 ]] || fail "taken: a checkpoint was committed"
[[ $(cat "$LOCK") == "host=intruder pid=1 start=2026-01-01T00:00:00Z" ]] || fail "taken: removed the other job's lock"
echo "save_lock: OK"
