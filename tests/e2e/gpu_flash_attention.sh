#!/usr/bin/env bash
# `pretrain-gpt --use-flash-attn --bf16` on a GPU against the CPU: 6 iterations of a tiny
# Llama-family GPT (RoPE, RMSNorm, SwiGLU, 2 KV groups of 2 query heads, head dimension 32,
# attention dropout 0.1, sequence 128 = two key tiles) whose fused attention on the GPU runs the
# warp-tile kernels (bf16, sm_80+: kernels/cuda/flash_attention_warp_tiles.cuh) inside training:
# GQA, the causal mask, the dropout draws and the backward as the model uses them. The lm loss
# and grad norm of every iteration must be the CPU's within half of bf16's unit roundoff
# (relative 1e-3): the GPU rounds the probabilities and dS to bf16 before their products where
# the CPU twin keeps f32, and its GEMMs sum in another order, which moves single activations by
# an ulp but these averages by ~1e-5 (loss) and ~2e-4 (grad norm) here. Exits 77 (CTest's skip)
# when the binary has no CUDA or no GPU is visible.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
source "$MEGATRON_SOURCE_DIR/tests/e2e/gpu_or_skip.bash"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
GPT=(pretrain-gpt --num-layers 2 --hidden-size 128 --num-attention-heads 4 --seq-length 128
     --max-position-embeddings 128 --mock-data --vocab-size 256 --make-vocab-size-divisible-by 32
     --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --seed 42 --log-interval 1
     --train-iters 6 --eval-iters 0 --bf16 --use-flash-attn --attention-dropout 0.1
     --ffn-hidden-size 192 --position-embedding-type rope --normalization RMSNorm --swiglu
     --group-query-attention --num-query-groups 2 --untie-embeddings-and-output-weights
     --disable-bias-linear)

run_on_gpu_and_cpu "fused attention training" "${GPT[@]}"
echo "== --use-flash-attn --bf16: CPU vs cuda:0"
node "$MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js" "$WORK/cpu.jsonl" "$WORK/cuda:0.jsonl" \
  --from 1 --to 6 --rtol 1e-3
echo "fused attention training on a GPU: OK"
