#!/usr/bin/env bash
# `megatron bench --mode step` runs end to end on a tiny GPT and prints its figures, and with
# --breakdown a row per kernel (GEMMs by shape) against its floors, ending with what ran outside
# kernels and the step; --timed-iters 0 is rejected with a message naming it.
set -euo pipefail
out=$("$MEGATRON_BINARY" bench --mode step --device cpu --breakdown --num-layers 1 \
  --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 2 \
  --vocab-size 512 --warmup-iters 1 --timed-iters 2 2>&1)
echo "$out"
for row in "step time (ms): [0-9.]* | tokens/s: [0-9.]*" "MFU: [0-9.]*%" \
  "breakdown per step (ms), floors at the GEMM ceiling" "^  layernorm_forward  *3 " \
  "^  gemm 64x192x64 NT  *1 " "^  outside kernels " "^  step  "; do
  grep -q -- "$row" <<<"$out" || { echo "missing: $row"; exit 1; }
done
if err=$("$MEGATRON_BINARY" bench --mode step --device cpu --timed-iters 0 2>&1); then
  echo "bench --timed-iters 0 should fail"; exit 1
fi
grep -q -- "--timed-iters" <<<"$err" || { echo "error does not name the flag: $err"; exit 1; }
echo PASS
