#!/usr/bin/env bash
# Megatron-Core's Nemotron-style variants (--apply-layernorm-1p, --squared-relu, --qk-layernorm,
# --rotary-interleaved on half of each head, GQA with 2 KV groups, no linear biases, an untied
# output layer) with the embedding and output layer on their own learning rate (--decoupled-lr,
# --decoupled-min-lr) train to the same lm loss and grad norm (relative <= 1e-5, 6 iterations,
# dropout on) at TP 1, TP 2 (KV groups split), TP 4 (KV groups replicated), TP 2 with sequence
# parallelism, PP 2 (embedding and output layer on different stages) and TP 2 x PP 2: the QK
# norms' replicated gains get their gradients summed over TP, the zero-centred gains, the
# interleaved rotation and the decoupled rate are layout-free. Without --decoupled-lr the losses
# differ (the flag is seen). The models run against PyTorch in
# tests/unit/model_variants_pytorch_golden_test.cpp, the decoupled AdamW against a double
# reference in tests/unit/optim_decoupled_lr_test.cpp.
set -euo pipefail
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0 --position-embedding-type rope --rotary-percent 0.5
  --rotary-interleaved --apply-layernorm-1p --squared-relu --qk-layernorm --group-query-attention
  --num-query-groups 2 --untie-embeddings-and-output-weights --disable-bias-linear)
DECOUPLED=(--decoupled-lr 1e-2 --decoupled-min-lr 1e-3)
source "$(dirname "$0")/tiny_gpt_run.bash"

run tp1 1 1 1 "${DECOUPLED[@]}"
run tp2 2 2 1 "${DECOUPLED[@]}"
run tp4 4 4 1 "${DECOUPLED[@]}"
run tp2_sp 2 2 1 --sequence-parallel "${DECOUPLED[@]}"
run pp2 2 1 2 "${DECOUPLED[@]}"
run tp2_pp2 4 2 2 "${DECOUPLED[@]}"
run tp1_coupled 1 1 1
for name in tp2 tp4 tp2_sp pp2 tp2_pp2; do
  echo "== tp1 vs $name"
  $CHECK "$WORK/tp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== without --decoupled-lr the training differs"
if $CHECK "$WORK/tp1.jsonl" "$WORK/tp1_coupled.jsonl" --from 2 --to 6 --rtol 1e-5 \
  > "$WORK/coupled.log" 2>&1; then
  echo "FAIL: --decoupled-lr changed nothing"; exit 1
fi
echo "model variants across layouts: OK"
