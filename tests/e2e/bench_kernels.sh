#!/usr/bin/env bash
# `megatron bench --mode kernels` runs end to end on tiny sizes and prints every GEMM row, the
# fused attention's row and every memory-bound kernel's row for both dtypes, and the flat-buffer
# passes once; a bad --dtype, and a --seq-length that does not divide
# --tokens, are rejected with a message naming them and a non-zero exit, and so is --device cuda
# where no GPU can run it (scripts/gpu_check.sh runs it on a GPU).
set -euo pipefail
out=$("$MEGATRON_BINARY" bench --mode kernels --min-time 0.01 --ceiling-size 64 --tokens 16 \
  --hidden-size 8 --ffn-hidden-size 32 --seq-length 8 --num-attention-heads 2 --copy-mb 1 \
  --vocab-size 64 --flat-buffer-elements 4096)
echo "$out"
for row in "copy bandwidth" "f32 GEMM ceiling" "bf16 GEMM ceiling" qkv.fwd proj.dX fc1.dW fc2.fwd \
  "fused attention f32 (b 2, s 8, heads 2, d 4, causal): forward [0-9.]* GFLOP/s" \
  "fused attention bf16 (b 2, s 8, heads 2, d 4, causal): forward [0-9.]* GFLOP/s"; do
  grep -q "$row" <<<"$out" || { echo "missing row: $row"; exit 1; }
done
[[ $(grep -c "^  layer " <<<"$out") == 2 ]] || { echo "expected one layer row per dtype"; exit 1; }
for dtype in f32 bf16; do
  grep -q "^$dtype memory-bound kernels (T 16, h 8, ffn 32, V 64)" <<<"$out" ||
    { echo "missing the $dtype memory-bound table"; exit 1; }
done
for kernel in layernorm_fwd layernorm_bwd rmsnorm_fwd rmsnorm_bwd rotary_fwd swiglu_fwd swiglu_bwd \
  bias_gelu_fwd bias_gelu_bwd dropout_mask dropout_fwd bias_dropout_add_fwd bias_dropout_add_bwd \
  softmax_fwd softmax_bwd ce_row_max ce_sum_exp ce_backward embedding_fwd embedding_bwd; do
  [[ $(grep -cE "^  $kernel +[0-9.]+ +[0-9]+%$" <<<"$out") == 2 ]] ||
    { echo "expected one $kernel row (GB/s, % copy) per dtype"; exit 1; }
done
grep -q "^flat f32 buffers (4096 parameters)" <<<"$out" || { echo "missing the flat-buffer table"; exit 1; }
for kernel in adamw cast_to_bf16 axpy sum_squares has_inf_or_nan; do
  grep -qE "^  $kernel +[0-9.]+ +[0-9]+%$" <<<"$out" || { echo "missing row: $kernel"; exit 1; }
done
if err=$("$MEGATRON_BINARY" bench --mode kernels --tokens 16 --seq-length 5 --hidden-size 8 \
  --ffn-hidden-size 32 --copy-mb 1 --min-time 0.01 2>&1); then
  echo "bench --seq-length 5 with --tokens 16 should fail"; exit 1
fi
grep -q -- "--seq-length 5 does not divide --tokens 16" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$MEGATRON_BINARY" bench --dtype f16 --ceiling-size 64 --tokens 16 --hidden-size 8 \
  --ffn-hidden-size 32 --seq-length 8 --num-attention-heads 2 --copy-mb 1 --min-time 0.01 2>&1); then
  echo "bench --dtype f16 should fail"; exit 1
fi
grep -q "'f16'" <<<"$err" || { echo "error does not name the dtype: $err"; exit 1; }
if ! command -v nvidia-smi >/dev/null; then
  if err=$("$MEGATRON_BINARY" bench --mode kernels --device cuda --min-time 0.01 2>&1); then
    echo "bench --device cuda should fail without a GPU"; exit 1
  fi
  grep -q -- "--device cuda: " <<<"$err" || { echo "error does not name --device: $err"; exit 1; }
fi
echo PASS
