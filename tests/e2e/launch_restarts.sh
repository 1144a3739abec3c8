#!/usr/bin/env bash
# Automatic restart (`megatron launch`, docs/reliability.md), around real jobs:
#  1. a transient fault injected under mpirun -np 2 (TP 2, --rerun-mode validate_results): the
#     job exits 17, the launcher restarts it from its newest checkpoint, the restarted job
#     finishes, and its losses equal those of a run that never failed, bit for bit;
#  2. a persistent fault: exit 16 with a checkpoint, exit 16 again on the restart (the same
#     node): the launcher stops after one restart — no loop — with the job's exit code 16;
#  3. --max-restarts 0: the first failure ends it;
#  4. a job that fails before saving anything, the same way twice: stops after one restart;
#  5. SIGTERM to the launcher reaches the job once (--exit-signal-handler: it saves at the
#     paused iteration and exits 0), and the launcher does not restart it;
#  6. usage errors: no command, a --save the command does not --load, the launcher under mpirun.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'exec 3>&- 2>/dev/null || true; rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2)
ITERS=8
GPT=(pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
     --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32
     --micro-batch-size 2 --global-batch-size 4 --train-iters $ITERS
     --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --seed 7
     --log-interval 1 --eval-interval 100 --eval-iters 0)

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*.log; do [[ -f $f ]] && { echo "--- $f" >&2; tail -40 "$f" >&2; }; done
  exit 1
}

# launch NAME LAUNCH_FLAGS... -- COMMAND...: sets $rc; the log is $WORK/NAME.log.
launch() {
  local name=$1
  shift
  rc=0
  timeout 600 "$MEGATRON_BINARY" launch "$@" > "$WORK/$name.log" 2>&1 || rc=$?
  [[ $rc -ne 124 ]] || fail "$name did not finish"
}

expect() {  # expect NAME CODE
  [[ $rc -eq $2 ]] || fail "$1 exited $rc, expected $2"
}

has() {  # has NAME TEXT
  grep -qF -- "$2" "$WORK/$1.log" || fail "$1: no '$2' in the log"
}

attempts() {  # the number of attempts NAME's launcher started
  grep -c "megatron launch: attempt " "$WORK/$1.log"
}

# JOB: a parallel job (TP 2) that saves every iteration and resumes from what it saved.
tp2_job() {  # tp2_job NAME FLAGS...
  local name=$1
  shift
  JOB=("${MPIRUN[@]}" "$MEGATRON_BINARY" "${GPT[@]}" --tensor-model-parallel-size 2
       --metrics-file "$WORK/$name.jsonl" --save "$WORK/ck_$name" --load "$WORK/ck_$name"
       --save-interval 1 "$@")
}

# The reference: the same job, never failing.
timeout 300 "${MPIRUN[@]}" "$MEGATRON_BINARY" "${GPT[@]}" --tensor-model-parallel-size 2 \
  --metrics-file "$WORK/ref.jsonl" > "$WORK/ref.log" 2>&1 || fail "the reference run failed"

# 1. Transient fault: restarted, finished, the same losses.
name=transient
tp2_job $name --rerun-mode validate_results --error-injection-rate 12 \
  --error-injection-type transient_error
launch $name --restart-delay 0 -- "${JOB[@]}"
expect $name 0
has $name "Possible transient error!!"
has $name "the job ended with exit 17"
has $name "resumes from it"
has $name "megatron launch: the job finished after"
(( $(attempts $name) >= 2 )) || fail "$name: the launcher never restarted the job"
$CHECK "$WORK/ref.jsonl" "$WORK/$name.jsonl" --from 1 --to $ITERS --exact ||
  fail "$name: the restarted job's losses differ from the uninterrupted run's"
echo "ok: transient fault: $(attempts $name) attempts, finished with the uninterrupted losses"

# 2. Persistent fault: exit 16, exit 16 again on the same node, stop.
name=persistent
tp2_job $name --rerun-mode validate_results --error-injection-rate 12 \
  --error-injection-type persistent_error
launch $name --restart-delay 0 -- "${JOB[@]}"
expect $name 16
has $name "Got rescheduled on the same GPU"
has $name "a persistent error, not restarting"
[[ $(attempts $name) -eq 2 ]] || fail "$name: $(attempts $name) attempts, expected 2"
echo "ok: persistent fault: exit 16 twice at the same checkpoint, stopped after one restart"

# 3. No restarts allowed.
name=no_restarts
tp2_job $name --rerun-mode validate_results --error-injection-rate 12 \
  --error-injection-type transient_error
launch $name --max-restarts 0 -- "${JOB[@]}"
expect $name 17
has $name "no restarts left (--max-restarts 0)"
[[ $(attempts $name) -eq 1 ]] || fail "$name: restarted with --max-restarts 0"
echo "ok: --max-restarts 0 stops at the first failure"

# 4. A job that cannot start (63 is not a multiple of 4 heads): one restart, then stop.
name=bad_config
launch $name --restart-delay 0 -- "$MEGATRON_BINARY" "${GPT[@]}" --hidden-size 63 \
  --save "$WORK/ck_$name" --load "$WORK/ck_$name"
expect $name 1
has $name "begins again: nothing was saved yet"
has $name "a persistent error, not restarting"
[[ $(attempts $name) -eq 2 ]] || fail "$name: $(attempts $name) attempts, expected 2"
echo "ok: a failure that repeats without progress stops after one restart"

# 5. SIGTERM to the launcher: passed on once, the job saves and exits 0, no restart.
name=sigterm
fifo="$WORK/$name.fifo"
mkfifo "$fifo"
exec 3<> "$fifo"
MEGATRON_TEST_PAUSE_AT_ITERATION=3 MEGATRON_TEST_PAUSE_FIFO=$fifo \
  timeout 300 "$MEGATRON_BINARY" launch --restart-delay 0 -- "$MEGATRON_BINARY" "${GPT[@]}" \
  --exit-signal-handler --save "$WORK/ck_$name" --load "$WORK/ck_$name" --save-interval 100 \
  > "$WORK/$name.log" 2>&1 &
job=$!
read -r -t 240 -u 3 _ _ || fail "$name: the job never paused at iteration 3"
kill -TERM $job
rc=0
wait $job || rc=$?
exec 3>&-
expect $name 0
has $name "exiting program after receiving SIGTERM at iteration 3"
has $name "megatron launch: stopped by SIGTERM"
[[ $(attempts $name) -eq 1 ]] || fail "$name: the launcher restarted a job it was told to stop"
[[ $(cat "$WORK/ck_$name/latest_checkpointed_iteration.txt") -eq 3 ]] ||
  fail "$name: no checkpoint of iteration 3"
echo "ok: SIGTERM to the launcher: the job saved iteration 3 and exited 0, no restart"

# 6. Usage errors, each with its sentence.
launch no_command --max-restarts 1
expect no_command 1
has no_command "megatron launch needs the command of the job after '--'"
launch save_only -- "$MEGATRON_BINARY" "${GPT[@]}" --save "$WORK/ck_save_only"
expect save_only 1
has save_only "loads nothing: a restart would not resume from what it saved; add --load"
rc=0
timeout 120 mpirun --allow-run-as-root -np 1 "$MEGATRON_BINARY" launch -- true \
  > "$WORK/under_mpirun.log" 2>&1 || rc=$?
[[ $rc -ne 0 ]] || fail "launch under mpirun was accepted"
has under_mpirun "must run outside mpirun/srun"
echo "ok: usage errors name the fix"
