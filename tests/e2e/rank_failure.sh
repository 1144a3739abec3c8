#!/usr/bin/env bash
# Job-wide failure handling, through `megatron comm-check` (docs/parallelism.md):
# - a healthy 4-rank job verifies its collectives and exits 0;
# - when one rank fails (--fail-rank 2) while the others wait in a collective, the job ends
#   promptly (well inside `timeout 60`) with a non-zero exit code and the failing rank's
#   "error: ..." line, printed once;
# - an error every rank hits (a bad --tensor-model-parallel-size) names the flag, once;
# - without mpirun the binary runs as a world of one and fails cleanly too.
set -euo pipefail
: "${MEGATRON_BINARY:?set MEGATRON_BINARY to the megatron executable}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
MPIRUN=(mpirun --oversubscribe --allow-run-as-root --bind-to none -np 4)

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*; do echo "--- $f" >&2; cat "$f" >&2; done
  exit 1
}

# Runs a command under `timeout 60`, stdout/stderr to $WORK/out, $WORK/err; sets $rc.
run() {
  rc=0
  timeout 60 "$@" >"$WORK/out" 2>"$WORK/err" || rc=$?
  [[ $rc -ne 124 && $rc -ne 137 ]] || fail "'$*' did not finish within 60 s (a rank hung)"
}

# 1. Healthy job.
run "${MPIRUN[@]}" "$MEGATRON_BINARY" comm-check --tensor-model-parallel-size 2 --bandwidth-mb 1
[[ $rc -eq 0 ]] || fail "healthy comm-check exited $rc"
grep -q "rank grid verified: tensor-parallel 2 x data-parallel 2 x pipeline-parallel 1" \
  "$WORK/out" || fail "healthy comm-check did not verify the 2x2 grid"
[[ $(grep -c "comm-check: OK" "$WORK/out") -eq 1 ]] || fail "expected one 'comm-check: OK' line"

# 2. Rank 2 fails while ranks 0, 1, 3 are blocked in their first collective.
run "${MPIRUN[@]}" "$MEGATRON_BINARY" comm-check --fail-rank 2 --bandwidth-mb 0
[[ $rc -ne 0 ]] || fail "job with a failing rank exited 0"
expected="error: comm-check: failure injected on rank 2 by --fail-rank"
[[ $(grep -cxF "$expected" "$WORK/err") -eq 1 ]] || fail "expected '$expected' once on stderr"
! grep -q "comm-check: OK" "$WORK/out" || fail "a job with a failed rank reported OK"

# 3. A grid that does not fit the world: every rank fails with a message naming the flag.
run "${MPIRUN[@]}" "$MEGATRON_BINARY" comm-check --tensor-model-parallel-size 3 --bandwidth-mb 0
[[ $rc -ne 0 ]] || fail "tensor-model-parallel-size 3 at 4 ranks exited 0"
grep -q "error: .*world size 4.*--tensor-model-parallel-size 3" "$WORK/err" ||
  fail "the grid error does not name --tensor-model-parallel-size and the world size"
# Printed once (by rank 0), and one MPI_Abort: no ORTE_ERROR_LOG from concurrent aborts.
[[ $(grep -c "^error: " "$WORK/err") -eq 1 ]] || fail "the error every rank hits is printed more than once"
! grep -q "ORTE_ERROR_LOG" "$WORK/err" || fail "ORTE_ERROR_LOG noise after the error"

# 4. No launcher: a world of one process.
run "$MEGATRON_BINARY" comm-check --bandwidth-mb 0
[[ $rc -eq 0 ]] || fail "single-process comm-check exited $rc"
run "$MEGATRON_BINARY" comm-check --fail-rank 0
[[ $rc -eq 1 ]] || fail "single-process failure exited $rc, expected 1"
grep -qxF "error: comm-check: failure injected on rank 0 by --fail-rank" "$WORK/err" ||
  fail "single-process failure message missing"
echo "rank_failure: OK"
