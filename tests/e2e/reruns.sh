#!/usr/bin/env bash
# Megatron's rerun state machine (--rerun-mode validate_results, docs/reliability.md) under
# mpirun, with injected faults (--error-injection-rate/-type), at TP2 x PP2 and at TP2 x DP2
# with the distributed optimizer:
#  1. faults injected into a non-fatal check (--check-for-spiky-loss) of every type: iterations
#     run twice, training continues, and the losses equal those of a run that never re-ran
#     (bit for bit: a re-run touches no optimizer state, data position or RNG);
#     report_determinism_stats runs every iteration twice, with the same losses, and finds
#     every result identical;
#  2. a transient fault: exit 17, nothing saved; the resumed run ends with the losses of an
#     uninterrupted run;
#  3. a persistent fault: exit 16 with a checkpoint of the state before the iteration; restarted
#     on the same node: exit 16 again; on another node (MEGATRON_TEST_NODE_NAME): "Possible
#     persistent error", exit 17; the tracker file names the iteration and its batch, and no
#     restart trains past it;
#  4. a correct result: exit 16, then exit 17 on another node ("Correct result"); the next
#     run skips the iteration (the tracker file's verdict) and ends with the losses of an
#     uninjected run given --iterations-to-skip;
#  5. a real fault, no injection (--lr 1e4 diverges): exit 16 with a finite checkpoint of the
#     state before the NaN iteration, then "Correct result" and exit 17 on another node.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"
ITERS=8

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# run NAME LAYOUT [FLAGS...]: 4 processes; LAYOUT is pp (TP2 PP2) or dp (TP2 DP2, distributed
# optimizer). Sets $rc; the log is $WORK/NAME.log, the metrics $WORK/NAME.jsonl.
run() {
  local name=$1 layout=$2
  shift 2
  local parallel=(--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2)
  [[ $layout == dp ]] && parallel=(--tensor-model-parallel-size 2 --use-distributed-optimizer)
  rc=0
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 4 \
    "$MEGATRON_BINARY" pretrain-gpt \
    --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size 2 --global-batch-size 8 --train-iters $ITERS \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
    --clip-grad 1.0 --seed 42 --log-interval 1 --metrics-file "$WORK/$name.jsonl" \
    "${parallel[@]}" "$@" > "$WORK/$name.log" 2>&1 || rc=$?
  [[ $rc -ne 124 ]] || { cat "$WORK/$name.log"; fail "$name did not finish"; }
}

# expect NAME CODE: the run exited CODE.
expect() {
  [[ $rc -eq $2 ]] || { cat "$WORK/$1.log"; fail "$1 exited $rc, expected $2"; }
}

has() {  # has NAME TEXT
  grep -qF -- "$2" "$WORK/$1.log" || { cat "$WORK/$1.log"; fail "$1: no '$2' in the log"; }
}

# The iteration of the first rejected result in NAME's log.
injected_iteration() {
  sed -n 's/.*Unexpected result .* at iteration #\([0-9]*\) .*/\1/p' "$WORK/$1.log" | head -1
}

for layout in pp dp; do
  echo "== layout $layout"
  run "ref_$layout" $layout
  expect "ref_$layout" 0

  # 1. Non-fatal checks: every fault type re-runs and continues; the losses are untouched.
  for type in correct_result transient_error persistent_error; do
    name="spiky_${type}_$layout"
    run "$name" $layout --rerun-mode validate_results --check-for-spiky-loss \
      --no-check-for-nan-in-loss-and-grad --error-injection-rate 2 --error-injection-type $type
    expect "$name" 0
    has "$name" "Result validation enabled"
    has "$name" "Need to rerun step to check reproducibility of initial result"
    has "$name" "Continuing normal execution because failed validation was not fatal"
    $CHECK "$WORK/ref_$layout.jsonl" "$WORK/$name.jsonl" --from 1 --to $ITERS --exact ||
      fail "$name: a re-run changed the losses"
  done
  name="stats_$layout"
  run "$name" $layout --rerun-mode report_determinism_stats
  expect "$name" 0
  has "$name" "Stats on computation determinism in validation calls"
  has "$name" "samples, all identical"
  ! grep -q "rel. variability" "$WORK/$name.log" || fail "$name: CPU results differ between runs"
  $CHECK "$WORK/ref_$layout.jsonl" "$WORK/$name.jsonl" --from 1 --to $ITERS --exact

  # 2. Transient: exit 17 without saving; the resumed run equals the uninterrupted one.
  name="transient_$layout"
  run "$name" $layout --rerun-mode validate_results --error-injection-rate 8 \
    --error-injection-type transient_error --save "$WORK/ck_$name" --save-interval 1
  expect "$name" 17
  has "$name" "Injecting error type Transient error"
  has "$name" "Possible transient error!!"
  has "$name" "Exiting now. The job can be resumed from a previous checkpoint"
  k=$(injected_iteration "$name")
  [[ $(cat "$WORK/ck_$name/latest_checkpointed_iteration.txt") -eq $((k - 1)) ]] ||
    fail "$name: the newest checkpoint is not that of iteration $((k - 1))"
  ! grep -q "iteration *$k/" "$WORK/$name.log" || fail "$name: iteration $k was logged"
  run "${name}_resumed" $layout --rerun-mode validate_results \
    --load "$WORK/ck_$name" --save "$WORK/ck_$name" --save-interval 100
  expect "${name}_resumed" 0
  $CHECK "$WORK/ref_$layout.jsonl" "$WORK/${name}_resumed.jsonl" --from "$k" --to $ITERS --exact
  echo "ok: transient fault at iteration $k: exit 17, resumed bit for bit"

  # 3. Persistent: exit 16 + checkpoint; same node: exit 16; another node: exit 17.
  name="persistent_$layout"
  tracker="$WORK/tracker_$name.txt"
  run "$name" $layout --rerun-mode validate_results --error-injection-rate 8 \
    --error-injection-type persistent_error --save "$WORK/ck_$name" \
    --result-rejected-tracker-filename "$tracker"
  expect "$name" 16
  has "$name" "Injecting error type Persistent error"
  has "$name" "First rerun: unexpected result is reproducible within the tolerance"
  has "$name" "Saving a checkpoint and exiting now. Please resume the job from the checkpoint to rerun the last iteration and establish a diagnostic"
  k=$(injected_iteration "$name")
  [[ $(cat "$WORK/ck_$name/latest_checkpointed_iteration.txt") -eq $((k - 1)) ]] ||
    fail "$name: no checkpoint of iteration $((k - 1))"
  resume=(--rerun-mode validate_results --load "$WORK/ck_$name" --save "$WORK/ck_$name"
    --result-rejected-tracker-filename "$tracker")
  run "${name}_same_node" $layout "${resume[@]}"
  expect "${name}_same_node" 16
  has "${name}_same_node" "Got rescheduled on the same GPU"
  for attempt in 1 2; do  # a launcher that restarts anyway gets the same verdict: no loop
    MEGATRON_TEST_NODE_NAME=other-node run "${name}_other_node" $layout "${resume[@]}"
    expect "${name}_other_node" 17
    has "${name}_other_node" "Getting RerunStateMachine state from checkpoint. Will rerun step."
    has "${name}_other_node" "Possible persistent error!!"
    ! grep -q "iteration *$k/" "$WORK/${name}_other_node.log" || fail "$name: trained iteration $k"
  done
  grep -q "iteration=$k status=first_rerun_reproducible result=.* samples=$(((k - 1) * 8))..$((k * 8 - 1))" \
    "$tracker" || { cat "$tracker"; fail "$name: the tracker does not name iteration $k's batch"; }
  grep -q "iteration=$k status=second_rerun_not_reproducible" "$tracker" ||
    { cat "$tracker"; fail "$name: no persistent verdict in the tracker"; }
  echo "ok: persistent fault at iteration $k: exit 16, 16 on the same node, 17 elsewhere"

  # 4. Correct result: exit 16, exit 17 elsewhere, then the iteration is skipped.
  name="correct_$layout"
  tracker="$WORK/tracker_$name.txt"
  run "$name" $layout --rerun-mode validate_results --error-injection-rate 8 \
    --error-injection-type correct_result --save "$WORK/ck_$name" \
    --result-rejected-tracker-filename "$tracker"
  expect "$name" 16
  k=$(injected_iteration "$name")
  resume=(--rerun-mode validate_results --load "$WORK/ck_$name" --save "$WORK/ck_$name"
    --result-rejected-tracker-filename "$tracker")
  MEGATRON_TEST_NODE_NAME=other-node run "${name}_other_node" $layout "${resume[@]}"
  expect "${name}_other_node" 17
  has "${name}_other_node" "Correct result (but possible Application error)"
  MEGATRON_TEST_NODE_NAME=other-node run "${name}_skipped" $layout "${resume[@]}"
  expect "${name}_skipped" 0
  has "${name}_skipped" "skipping iteration $k"
  run "skip_ref_$layout" $layout --iterations-to-skip "$k"
  expect "skip_ref_$layout" 0
  $CHECK "$WORK/skip_ref_$layout.jsonl" "$WORK/${name}_skipped.jsonl" --from $((k + 1)) \
    --to $ITERS --exact
  echo "ok: correct result at iteration $k: exit 16, 17, then skipped"
done
# 5. A real fault (a run that diverges, --lr 1e4): the NaN loss reproduces, so the state
# before the iteration is saved (finite) with exit 16; elsewhere it reproduces again: exit 17.
name=diverged
tracker="$WORK/tracker_$name.txt"
run "$name" pp --lr 1e4 --rerun-mode validate_results --save "$WORK/ck_$name" \
  --result-rejected-tracker-filename "$tracker"
expect "$name" 16
k=$(injected_iteration "$name")
grep -q "Unexpected result \(nan\|inf\) .* at iteration #$k" "$WORK/$name.log" ||
  fail "$name: the rejected result is not the non-finite loss"
[[ $(cat "$WORK/ck_$name/latest_checkpointed_iteration.txt") -eq $((k - 1)) ]] ||
  fail "$name: no checkpoint of iteration $((k - 1))"
node "$MEGATRON_SOURCE_DIR/tests/e2e/check_checkpoint_finite.js" "$WORK/ck_$name" ||
  fail "$name: the checkpoint holds inf/nan"
MEGATRON_TEST_NODE_NAME=other-node run "${name}_other_node" pp --lr 1e4 \
  --rerun-mode validate_results --load "$WORK/ck_$name" --save "$WORK/ck_$name" \
  --result-rejected-tracker-filename "$tracker"
expect "${name}_other_node" 17
has "${name}_other_node" "Correct result (but possible Application error)"
grep -q "iteration=$k status=second_rerun_reproducible" "$tracker" ||
  { cat "$tracker"; fail "$name: no verdict in the tracker"; }
echo "ok: a diverged loss at iteration $k: exit 16 with a finite checkpoint, then 17"
echo "reruns: OK"
