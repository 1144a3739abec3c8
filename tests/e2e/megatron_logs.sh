#!/usr/bin/env bash
# Megatron's optional logs and GeLU forms through the binary, on a tiny mock-data GPT:
# - --log-num-zeros-in-grad: "num zeros: N" where N is the vocabulary padding rows' zero
#   gradients (4 rows x h 64 = 256), the same at TP 1, TP 2 and DP 2 with the distributed
#   optimizer (each element counted once);
# - --log-throughput: Megatron's "throughput per GPU (TFLOP/s/GPU)" field;
# - --timing-log-level 1 / 2 and --timing-log-option: Megatron's timer block, names and layouts;
# - GeLU: erf by default, tanh with --openai-gelu, recorded in the checkpoint ("openai_gelu"),
#   so resuming with the other form is refused by name; the two forms train differently;
# - Megatron's memory report after the first iteration, once by each data-parallel rank 0 (both
#   ranks at TP 2, rank 0 only at DP 2), with consistent figures; --log-memory-to-tensorboard
#   writes Megatron's mem-* tags;
# - Megatron's theoretical memory report before it, by rank 0 only, from the planner: its total
#   is the memory report's "allocated" (live tensors) at TP 1, TP 2, in bf16 and with one
#   micro-batch per step (whose arena merges its growth blocks at the end of the step, before
#   the report) (within 1% + 0.03 MB: these models hold ~2 MB, and a few small buffers are not
#   modelled);
# - OpenBLAS forced to AVX2 kernels (OPENBLAS_CORETYPE=Haswell) on an AVX-512 CPU: one warning
#   (rank 0) saying how to let OpenBLAS choose; none with its own choice.
set -euo pipefail
: "${MEGATRON_BINARY:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
# Vocabulary 124 padded to 128: 4 rows that no token reaches.
MODEL=(--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32
       --mock-data --vocab-size 124 --make-vocab-size-divisible-by 64
       --micro-batch-size 2 --global-batch-size 4 --lr 1e-3 --log-interval 1
       --eval-interval 1000 --eval-iters 0 --train-iters 2)
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run NAME NP FLAGS...
  local name=$1 np=$2
  shift 2
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt "${MODEL[@]}" "$@" > "$WORK/$name.log" 2>&1 \
    || { cat "$WORK/$name.log"; fail "run $name"; }
}

echo "== num zeros at TP 1, TP 2, DP 2 (distributed optimizer)"
# Without dropout: a dropout mask can zero every occurrence of a position-embedding element in
# a small batch, whose gradient is then an exact zero too (Megatron counts those as well).
NO_DROPOUT=(--hidden-dropout 0 --attention-dropout 0)
run tp1 1 --log-num-zeros-in-grad --log-throughput "${NO_DROPOUT[@]}"
run tp2 2 --log-num-zeros-in-grad --tensor-model-parallel-size 2 "${NO_DROPOUT[@]}"
run dp2 2 --log-num-zeros-in-grad --use-distributed-optimizer "${NO_DROPOUT[@]}"
for name in tp1 tp2 dp2; do
  zeros=$(grep -o "num zeros: [0-9]*" "$WORK/$name.log" | awk '{print $3}' | sort -u)
  [[ "$zeros" == "256" ]] || fail "$name: num zeros '$zeros', expected 256"
done
grep -q "| throughput per GPU (TFLOP/s/GPU): [0-9.]* | learning rate:" "$WORK/tp1.log" \
  || fail "throughput field"
! grep -q "throughput per GPU" "$WORK/tp2.log" || fail "throughput without --log-throughput"

echo "== timers"
run timers1 2 --timing-log-level 1 --tensor-model-parallel-size 2
grep -q "^(min, max) time across ranks (ms):$" "$WORK/timers1.log" || fail "minmax header"
grep -Eq "^    forward-backward \.+: \([0-9.]+, [0-9.]+\)$" "$WORK/timers1.log" \
  || fail "forward-backward line"
grep -Eq "^    optimizer \.+: " "$WORK/timers1.log" || fail "optimizer line"
run timers2 2 --timing-log-level 2 --timing-log-option all
grep -q "^times across ranks (ms):$" "$WORK/timers2.log" || fail "all header"
grep -Eq "^     rank  1: [0-9.]+$" "$WORK/timers2.log" || fail "rank 1 line"
run timers0 1
! grep -q "time across ranks" "$WORK/timers0.log" || fail "timers at level 0"
if "$MEGATRON_BINARY" pretrain-gpt "${MODEL[@]}" --timing-log-level 3 > "$WORK/bad.log" 2>&1; then
  fail "--timing-log-level 3 accepted"
fi
grep -q -- "--timing-log-level must be 0, 1 or 2, got 3" "$WORK/bad.log" || fail "level message"

echo "== GeLU forms"
# --log-args: the argument dump shows the form.
run erf 1 --save "$WORK/erf" --metrics-file "$WORK/erf.jsonl" --log-args
run tanh 1 --openai-gelu --save "$WORK/tanh" --metrics-file "$WORK/tanh.jsonl" --log-args
grep -q "openai_gelu \.* False" "$WORK/erf.log" || fail "erf: argument dump"
grep -q "openai_gelu \.* True" "$WORK/tanh.log" || fail "tanh: argument dump"
grep -q '"openai_gelu": *true' "$WORK/tanh/iter_0000002/mp_rank_00/state.json" \
  || fail "tanh: not recorded in the checkpoint"
losses() { grep -o '"lm_loss":[^,]*' "$1"; }
[[ "$(losses "$WORK/erf.jsonl")" != "$(losses "$WORK/tanh.jsonl")" ]] \
  || fail "the two forms trained identically"
if "$MEGATRON_BINARY" pretrain-gpt "${MODEL[@]}" --train-iters 3 --load "$WORK/tanh" \
     > "$WORK/resume.log" 2>&1; then
  fail "resuming a tanh checkpoint with the erf form was accepted"
fi
grep -q "openai_gelu: checkpoint true, flags false" "$WORK/resume.log" || fail "resume message"
# One more iteration than the checkpoint's run: its schedule, from the command line.
run resume 1 --train-iters 3 --load "$WORK/tanh" --openai-gelu --override-opt_param-scheduler
echo "== memory report"
MEMORY_LINE='\[Rank [0-9]\] \(after 1 iterations\) memory \(MB\) \| allocated: [0-9.]+ \| max allocated: [0-9.]+ \| reserved: [0-9.]+ \| max reserved: [0-9.]+$'
ranks() { grep -E "$MEMORY_LINE" "$WORK/$1.log" | awk '{print $2}' | tr -d ']' | sort | tr '\n' ' '; }
[[ "$(ranks tp2)" == "0 1 " ]] || fail "TP 2: memory report from ranks '$(ranks tp2)', expected 0 and 1"
[[ "$(ranks dp2)" == "0 " ]] || fail "DP 2: memory report from ranks '$(ranks dp2)', expected 0 only"
grep -E "$MEMORY_LINE" "$WORK/tp1.log" | awk -F'[:|]' '
  { allocated = $3; max_allocated = $5; reserved = $7; max_reserved = $9 }
  END { exit !(allocated > 0 && max_allocated >= allocated && reserved > 0 &&
               max_reserved >= reserved) }' || fail "TP 1: memory report figures: $(grep -E "$MEMORY_LINE" "$WORK/tp1.log")"
echo "== theoretical memory report"
run bf16 1 --bf16
run one_micro_batch 1 --micro-batch-size 4
run block_recompute 1 --recompute-granularity full --recompute-method block --recompute-num-layers 1
THEORY_LINE='^Theoretical memory footprints: weight and optimizer=[0-9.]+ MB, activation=[0-9.]+ MB, total=[0-9.]+ MB$'
for name in tp1 tp2 bf16 one_micro_batch block_recompute; do
  [[ $(grep -cE "$THEORY_LINE" "$WORK/$name.log") == 1 ]] || fail "$name: not one theoretical memory line"
  grep -q "^Total number of parameters in billions: 0.00$" "$WORK/$name.log" || fail "$name: parameter lines"
  total=$(grep -E "$THEORY_LINE" "$WORK/$name.log" | sed 's/.*total=\([0-9.]*\) MB/\1/')
  allocated=$(grep -E "$MEMORY_LINE" "$WORK/$name.log" | grep "^\[Rank 0\]" | awk -F'[:|]' '{print $3}')
  awk -v t="$total" -v a="$allocated" 'BEGIN { d = t - a; if (d < 0) d = -d; exit !(a > 0 && d <= 0.01 * a + 0.03) }' ||
    fail "$name: theoretical total $total MB, allocated $allocated MB"
  echo "   $name: theoretical total $total MB, allocated $allocated MB"
done
run memory_tb 1 --log-memory-to-tensorboard --tensorboard-dir "$WORK/tb"
for tag in mem-reserved-bytes mem-allocated-bytes mem-max-allocated-bytes mem-allocated-count; do
  grep -qa -- "$tag" "$WORK"/tb/events.* || fail "--log-memory-to-tensorboard wrote no $tag"
done

echo "== OpenBLAS's kernels below the CPU's"
# With OpenBLAS forced to its AVX2 (Haswell) kernels on an AVX-512 CPU, rank 0 warns once and
# says how to undo it; with OpenBLAS's own choice, no warning.
if ldd "$MEGATRON_BINARY" | grep -q libopenblas; then
  OPENBLAS_CORETYPE=Haswell run haswell 2 --tensor-model-parallel-size 2
  OPENBLAS_CORETYPE= run own_choice 1
  warnings=$(grep -c "OpenBLAS runs its Haswell kernels on this AVX-512 CPU (OPENBLAS_CORETYPE=Haswell).*unset OPENBLAS_CORETYPE" "$WORK/haswell.log" || true)
  if grep -qw avx512f /proc/cpuinfo; then
    [[ $warnings == 1 ]] || fail "$warnings OpenBLAS core warnings at TP 2 on an AVX-512 CPU (want one, rank 0's)"
  else
    [[ $warnings == 0 ]] || fail "an OpenBLAS core warning on a CPU without AVX-512"
  fi
  ! grep -q "OpenBLAS runs its" "$WORK/own_choice.log" || fail "a warning with OpenBLAS's own core"
  echo "   $warnings warning(s) with OPENBLAS_CORETYPE=Haswell, none with OpenBLAS's own choice"
fi

echo "megatron logs e2e OK"
