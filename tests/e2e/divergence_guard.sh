#!/usr/bin/env bash
# The divergence guard (docs/reliability.md): a run that diverges by itself (--lr 1e4)
#  - fp32 and fp16: stops with a non-zero exit and one message naming the iteration and the
#    quantity, and every committed checkpoint holds finite values only (read back by an
#    independent safetensors reader, check_checkpoint_finite.js);
#  - with --no-check-for-nan-in-loss-and-grad: trains on, but the save after the divergence is
#    refused (non-zero exit), the tracker still names a finite checkpoint, and a NaN loss
#    prints as "nan" — never "-NAN" or a perplexity — in the log and the metrics file.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
FINITE=(node "$MEGATRON_SOURCE_DIR/tests/e2e/check_checkpoint_finite.js")
BASE=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
      --micro-batch-size 2 --global-batch-size 4 --mock-data --vocab-size 128
      --train-iters 20 --lr 1e4 --log-interval 1 --eval-interval 5 --eval-iters 1)

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*.out "$WORK"/*.err; do [[ -f $f ]] && { echo "--- $f" >&2; tail -20 "$f" >&2; }; done
  exit 1
}

# run NAME FLAGS...: sets $rc; stdout/stderr in $WORK/NAME.out/.err.
run() {
  local name=$1
  shift
  rc=0
  timeout 300 "$MEGATRON_BINARY" pretrain-gpt "${BASE[@]}" "$@" \
    > "$WORK/$name.out" 2> "$WORK/$name.err" || rc=$?
  [[ $rc -ne 124 ]] || fail "$name did not finish"
}

# 1 and 2. fp32 and fp16 diverge: stopped, one clear message, no non-finite checkpoint.
for precision in fp32 fp16; do
  flags=(--save "$WORK/ck_$precision" --save-interval 2)
  # fp16: a small initial loss scale, so that steps are taken and the f16 weights overflow.
  [[ $precision == fp16 ]] && flags+=(--fp16 --initial-loss-scale 1024)
  run "$precision" "${flags[@]}"
  [[ $rc -ne 0 ]] || fail "$precision: a diverging run exited 0"
  [[ $(grep -c '^error: ' "$WORK/$precision.err") -eq 1 ]] || fail "$precision: expected one error line"
  grep -q '^error: training diverged at iteration [0-9]*: ' "$WORK/$precision.err" ||
    fail "$precision: no 'training diverged at iteration N' message"
  ! grep -q 'check `' "$WORK/$precision.err" || fail "$precision: internal check text in the message"
  if [[ $precision == fp32 ]]; then
    grep -Eq 'the (lm loss|grad norm) is (nan|inf|-inf)' "$WORK/$precision.err" ||
      fail "fp32: the message does not name the non-finite quantity"
  else
    grep -q 'hold inf or nan after the optimizer step (--fp16' "$WORK/$precision.err" ||
      fail "fp16: the message does not name the overflowed weights"
  fi
  stopped=$(sed -n 's/^error: training diverged at iteration \([0-9]*\):.*/\1/p' "$WORK/$precision.err")
  ! grep -q "iteration *$((stopped + 1))/" "$WORK/$precision.out" || fail "$precision: trained past $stopped"
  "${FINITE[@]}" "$WORK/ck_$precision" || fail "$precision: a committed checkpoint holds inf/nan"
  echo "ok: $precision stops at iteration $stopped; $(cat "$WORK/ck_$precision/latest_checkpointed_iteration.txt" 2>/dev/null || echo no) checkpoint committed, finite"
done

# 3. The guard off: the run goes on with nan, but no non-finite checkpoint is committed.
run off --no-check-for-nan-in-loss-and-grad --save "$WORK/ck_off" --save-interval 2
[[ $rc -ne 0 ]] || fail "off: a save of non-finite weights exited 0"
grep -q '^error: writing the checkpoint: refusing to save the checkpoint of iteration [0-9]*: the weights of .* hold inf or nan' \
  "$WORK/off.err" || fail "off: the refused save is not explained"
"${FINITE[@]}" "$WORK/ck_off" || fail "off: a committed checkpoint holds inf/nan"
[[ -f "$WORK/ck_off/latest_checkpointed_iteration.txt" ]] || fail "off: expected the finite early checkpoints"

# 4. nan is printed as nan: the log line, the validation block, the metrics file.
run nan --no-check-for-nan-in-loss-and-grad --metrics-file "$WORK/nan.jsonl"
[[ $rc -eq 0 ]] || fail "nan: exited $rc without --save"
grep -q 'lm loss value: nan | lm loss PPL: nan |' "$WORK/nan.out" || fail "nan: validation block"
! grep -q -- '-nan\|NAN' "$WORK/nan.out" || fail "nan: printf's -nan/NAN in the log"
! grep 'lm loss value: nan' "$WORK/nan.out" | grep -qv 'PPL: nan' || fail "nan: a perplexity for a nan loss"
grep -q 'grad norm: nan |' "$WORK/nan.out" || fail "nan: iteration line"
grep '"type":"validation"' "$WORK/nan.jsonl" | grep -q '"lm_loss":"nan"' || fail "nan: metrics file"
echo "divergence_guard: OK"
