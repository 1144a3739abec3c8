#!/usr/bin/env bash
# Slurm, for real (docs/reliability.md, "Slurm"): a one-node Slurm cluster from Debian's
# slurm-wlm that this test starts itself — slurmctld and slurmd with its own slurm.conf, ports,
# state and spool directories in a temporary directory, auth/none (no munge daemon, no systemd)
# — and then:
#  a) `srun -n 4 --mpi=pmix` trains a tiny GPT at TP 2 x DP 2 with the losses of `mpirun -np 4`,
#     bit for bit; so does `mpirun` inside an allocation (salloc);
#  b) ranks started by srun get the OpenMP thread count mpirun's get (OpenMPI tells a rank how
#     many ranks share its machine only inside MPI_Init, too late for OMP_NUM_THREADS);
#  c) a rank that fails alone ends the srun job (MPI_Abort through PMIx), with its message once;
#     `srun --mpi=none` (tasks without an MPI bootstrap) is refused with one message, instead of
#     every task training alone into the same --save;
#  d) examples/slurm_pretrain_gpt.sbatch, `scontrol requeue`d while it runs: Slurm sends SIGTERM
#     to every task, the ranks save at iteration 4 (--exit-signal-handler), the job goes back to
#     the queue, the same script resumes from the checkpoint and ends with the losses of an
#     uninterrupted run, bit for bit.
# The ranks pause at the end of an iteration and hand their pids to the test (the test hook of
# train/exit_signal.h), so signals arrive at a known iteration without sleeping.
# Skips (77) only where slurm-wlm is missing or its daemons cannot start here.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
skip() {
  echo "SKIP: $*"
  exit 77
}
for command in slurmctld slurmd srun sbatch salloc scontrol squeue sinfo scancel; do
  command -v "$command" >/dev/null ||
    skip "$command is missing (Debian's slurm-wlm; scripts/test.sh installs it)"
done
[[ $(id -u) -eq 0 ]] || skip "slurmd runs jobs as root only when started by root"

# Whatever Slurm job runs this test, the commands below talk to the test's own cluster.
while IFS= read -r variable; do unset "$variable"; done < <(compgen -e |
  grep -E '^(SLURM|SBATCH|SALLOC|SRUN|PMIX|PMI)_' || true)
WORK="$(mktemp -d)"
export SLURM_CONF="$WORK/slurm.conf"
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
EXAMPLE="$MEGATRON_SOURCE_DIR/examples/slurm_pretrain_gpt.sbatch"
NODE=megatron-test-node

stop_cluster() {
  exec 3>&- 2>/dev/null || true
  if [[ -f $WORK/slurmctld.pid ]]; then
    local jobs
    jobs=$(squeue -h -o %i 2>/dev/null || true)
    [[ -z $jobs ]] || scancel $jobs 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
      [[ -z $(squeue -h -o %i 2>/dev/null || true) ]] && break
      sleep 0.2
    done
  fi
  local pid pids=()
  for daemon in slurmd slurmctld; do
    [[ -f $WORK/$daemon.pid ]] && pid=$(cat "$WORK/$daemon.pid") && kill "$pid" 2>/dev/null &&
      pids+=("$pid")
  done
  for pid in "${pids[@]}"; do
    for ((i = 0; i < 100; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
  done
  rm -rf "$WORK"
}
trap stop_cluster EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*.log "$WORK"/*.out "$WORK"/slurm-logs/*; do
    [[ -f $f ]] && { echo "--- $f" >&2; tail -30 "$f" >&2; }
  done
  exit 1
}

# Two free TCP ports for the daemons (chosen by the kernel, released just before they bind).
read -r CONTROLLER_PORT NODE_PORT < <(node -e '
  const net = require("net");
  const a = net.createServer().listen(0, "127.0.0.1", () => {
    const b = net.createServer().listen(0, "127.0.0.1", () => {
      console.log(a.address().port, b.address().port);
      a.close();
      b.close();
    });
  });')
mkdir -p "$WORK/state" "$WORK/spool" "$WORK/tmp" "$WORK/slurm-logs"
# 4 CPUs whatever the machine has (config_overrides): the jobs below run 4 tasks. KillWait is
# the time between SIGTERM and SIGKILL when Slurm stops a job, for the ranks' save.
cat > "$SLURM_CONF" <<EOF
ClusterName=megatrontest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CONTROLLER_PORT
SlurmdPort=$NODE_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
MailProg=/bin/true
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool
TmpFS=$WORK/tmp
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd.pid
SlurmctldLogFile=$WORK/slurm-logs/slurmctld.log
SlurmdLogFile=$WORK/slurm-logs/slurmd.log
KillWait=30
NodeName=$NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -f "$SLURM_CONF" < /dev/null > "$WORK/slurm-logs/slurmctld.out" 2>&1 ||
  skip "slurmctld does not start here: $(tail -3 "$WORK"/slurm-logs/slurmctld.*)"
slurmd -f "$SLURM_CONF" -N "$NODE" < /dev/null > "$WORK/slurm-logs/slurmd.out" 2>&1 ||
  skip "slurmd does not start here: $(tail -3 "$WORK"/slurm-logs/slurmd.*)"
for ((i = 0; i < 150; i++)); do
  [[ $(sinfo -h -n "$NODE" -o %t 2>/dev/null) == idle ]] && break
  sleep 0.2
done
[[ $(sinfo -h -n "$NODE" -o %t 2>/dev/null) == idle ]] ||
  skip "the test cluster's node did not come up: $(tail -3 "$WORK"/slurm-logs/*.log)"
srun --mpi=list 2>&1 | grep -qw pmix || skip "this Slurm has no PMIx plugin (srun --mpi=list)"
echo "== Slurm $(slurmd -V | awk '{print $2}') up: node $NODE, controller port $CONTROLLER_PORT"

export OMP_NUM_THREADS=1
# Slurm's node has 4 CPUs on paper and the machine may have fewer: ranks that busy-poll in MPI
# would take the cores from the ranks they wait for. mpirun --oversubscribe turns on yielding
# by itself; ranks started by srun need to be told.
export OMPI_MCA_mpi_yield_when_idle=1
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 4)
TINY=(pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
  --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32
  --micro-batch-size 2 --global-batch-size 8 --lr 1e-3 --lr-warmup-iters 2
  --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 --clip-grad 1.0 --seed 42
  --tensor-model-parallel-size 2 --log-interval 1 --eval-interval 100 --eval-iters 0)

echo "== a) srun --mpi=pmix and mpirun inside an allocation match mpirun, bit for bit"
timeout 300 "${MPIRUN[@]}" "$MEGATRON_BINARY" "${TINY[@]}" --train-iters 8 \
  --metrics-file "$WORK/mpirun.jsonl" > "$WORK/mpirun.log" 2>&1 || fail "mpirun -np 4"
timeout 300 srun -n 4 --mpi=pmix "$MEGATRON_BINARY" "${TINY[@]}" --train-iters 8 \
  --metrics-file "$WORK/srun.jsonl" > "$WORK/srun.log" 2>&1 || fail "srun -n 4 --mpi=pmix"
$CHECK "$WORK/mpirun.jsonl" "$WORK/srun.jsonl" --from 1 --to 8 --exact
timeout 300 salloc -n 4 mpirun --allow-run-as-root --bind-to none "$MEGATRON_BINARY" \
  "${TINY[@]}" --train-iters 8 --metrics-file "$WORK/salloc.jsonl" > "$WORK/salloc.log" 2>&1 ||
  fail "salloc -n 4 mpirun"
$CHECK "$WORK/mpirun.jsonl" "$WORK/salloc.jsonl" --from 1 --to 8 --exact

# Starts `LAUNCHER... megatron TINY --exit-signal-handler` with OMP_NUM_THREADS unset, its ranks
# pausing at the end of iteration 1; prints "rank R: OMP_NUM_THREADS=T" for each rank as the
# process sees it (T empty: unset), then sends the ranks SIGTERM (they exit 0).
threads_per_rank() {
  local fifo="$WORK/threads.fifo" rank pid
  rm -f "$fifo"
  mkfifo "$fifo"
  exec 3<> "$fifo"
  MEGATRON_TEST_PAUSE_AT_ITERATION=1 MEGATRON_TEST_PAUSE_FIFO=$fifo env -u OMP_NUM_THREADS \
    timeout 300 "$@" "$MEGATRON_BINARY" "${TINY[@]}" --train-iters 4 --exit-signal-handler \
    > "$WORK/threads.log" 2>&1 &
  local job=$! waited=0
  for ((i = 0; i < 4; i++)); do
    until read -r -t 1 -u 3 rank pid; do
      kill -0 "$job" 2>/dev/null && ((++waited < 120)) || fail "$1: no rank paused at iteration 1"
    done
    echo "rank $rank: OMP_NUM_THREADS=$(tr '\0' '\n' < "/proc/$pid/environ" |
      sed -n 's/^OMP_NUM_THREADS=//p')"
    kill -TERM "$pid"
  done
  wait "$job" || fail "$1 (threads): exited $?"
  exec 3>&-
}
echo "== b) OpenMP threads per rank under srun are mpirun's"
mpirun_threads=$(threads_per_rank "${MPIRUN[@]}" -x MEGATRON_TEST_PAUSE_AT_ITERATION \
  -x MEGATRON_TEST_PAUSE_FIFO | sort | paste -sd ' ')
srun_threads=$(threads_per_rank srun -n 4 --mpi=pmix | sort | paste -sd ' ')
echo "mpirun: $mpirun_threads"
echo "srun:   $srun_threads"
[[ $mpirun_threads =~ ^(rank\ [0-3]:\ OMP_NUM_THREADS=[1-9][0-9]*\ ?){4}$ ]] ||
  fail "mpirun's ranks do not all have OMP_NUM_THREADS"
[[ $srun_threads == "$mpirun_threads" ]] || fail "srun's ranks run other thread counts than mpirun's"

echo "== c) a rank failing alone ends the srun job; srun without an MPI plugin is refused, once"
rc=0
timeout 60 srun -n 4 --mpi=pmix "$MEGATRON_BINARY" comm-check --fail-rank 2 --bandwidth-mb 0 \
  > "$WORK/rank_failure.log" 2>&1 || rc=$?
[[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] ||
  fail "srun job with a failing rank: exit $rc (0: not failed; 124, 137: hung)"
[[ $(grep -cxF "error: comm-check: failure injected on rank 2 by --fail-rank" \
  "$WORK/rank_failure.log") -eq 1 ]] || fail "srun job with a failing rank: its error, once"
rc=0
timeout 120 srun -n 2 --mpi=none "$MEGATRON_BINARY" "${TINY[@]}" --train-iters 2 \
  > "$WORK/mpi_none.log" 2>&1 || rc=$?
[[ $rc -ne 0 ]] || fail "srun --mpi=none trained"
[[ $(grep -c "^error: this process is task 0 of 2 that srun started without MPI" \
  "$WORK/mpi_none.log") -eq 1 && $(grep -c "^error:" "$WORK/mpi_none.log") -eq 1 ]] ||
  fail "srun --mpi=none: expected one error naming srun --mpi=pmix"
grep -q "srun --mpi=pmix" "$WORK/mpi_none.log" || fail "srun --mpi=none: the fix is not named"

echo "== d) scontrol requeue of the sbatch example: saves, requeues, resumes exactly"
fifo="$WORK/requeue.fifo"
mkfifo "$fifo"
exec 3<> "$fifo"
job=$(MEGATRON="$MEGATRON_BINARY" CKPT="$WORK/ck" TRAIN_LOG="$WORK/train.log" \
  MEGATRON_TEST_PAUSE_AT_ITERATION=4 MEGATRON_TEST_PAUSE_FIFO=$fifo \
  sbatch --parsable --nodes=1 --ntasks-per-node=4 --gpus-per-node=0 --cpus-per-task=1 \
  --output="$WORK/job.out" "$EXAMPLE" "${TINY[@]:1}" --train-iters 8 \
  --metrics-file "$WORK/requeued.jsonl") || fail "sbatch $EXAMPLE"
scontrol show job "$job" | grep -q "JobName=gpt-345m" ||
  fail "sbatch did not read the example's #SBATCH lines (its job name)"
waited=0
for ((i = 0; i < 4; i++)); do
  until read -r -t 1 -u 3 rank pid; do
    [[ $(squeue -h -j "$job" -o %T 2>/dev/null) =~ ^(PENDING|CONFIGURING|RUNNING)$ ]] &&
      ((++waited < 120)) || fail "job $job: no rank paused at iteration 4"
  done
done
exec 3>&-
scontrol requeue "$job"
state=""
for ((i = 0; i < 600; i++)); do  # the ranks save, the job ends (at most KillWait), then queues
  state=$(squeue -h -j "$job" -o %T 2>/dev/null || true)
  [[ $state == PENDING ]] && break
  sleep 0.1
done
[[ $state == PENDING ]] || fail "job $job is $state after scontrol requeue, not back in the queue"
[[ $(cat "$WORK/ck/latest_checkpointed_iteration.txt") == 4 ]] ||
  fail "the requeued job did not save iteration 4"
[[ $(grep -c "exiting program after receiving SIGTERM at iteration 4" "$WORK/train.log") -eq 1 ]] ||
  fail "expected one 'exiting program after receiving SIGTERM at iteration 4' line"
# Slurm holds a requeued job back for about two minutes (its BeginTime); let it start now.
scontrol update JobId="$job" StartTime=now
for ((i = 0; i < 1200; i++)); do
  state=$(scontrol show job "$job" | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
  [[ $state == PENDING || $state == RUNNING || $state == COMPLETING ]] || break
  sleep 0.1
done
[[ $state == COMPLETED ]] || fail "the requeued job $job ended $state"
grep -q "job $job, start 2:" "$WORK/job.out" || fail "the job script did not start a second time"
grep -q "loaded checkpoint from $WORK/ck at iteration 4" "$WORK/train.log" ||
  fail "the requeued job did not resume from iteration 4"
echo "== the requeued job's iterations 1-4 (before the requeue) and 5-8 (after) against mpirun's"
$CHECK "$WORK/mpirun.jsonl" "$WORK/requeued.jsonl" --from 1 --to 8 --exact
echo "slurm: OK"
