#!/usr/bin/env bash
# Multi-latent attention (--multi-latent-attention with a query latent, Megatron-Core's default
# YaRN RoPE at scaling factor 1, learned absolute positions as well, values narrower than the
# query/key heads) trains to the same lm loss and grad norm (relative <= 1e-5, 6 iterations,
# dropout on) at TP 1, TP 2 (heads split, latents replicated), TP 2 with sequence parallelism
# (latents computed on sequence shards, the shared RoPE key gathered), PP 2, TP 2 x PP 2 with
# sequence parallelism (the CI configs' layout), CP 2 (RoPE at each chunk's positions, ring
# attention), and with the fused attention core and full recompute. A direct query projection
# (no --q-lora-rank) and RMSNorm with --rope-type rope also match across TP 2 + SP. The model runs
# against PyTorch in tests/unit/mla_pytorch_golden_test.cpp and tests/dist/model_mla_tp_test.cpp.
set -euo pipefail
MLA=(--multi-latent-attention --kv-lora-rank 16 --qk-head-dim 16 --qk-pos-emb-head-dim 8
  --v-head-dim 12 --untie-embeddings-and-output-weights)
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0 "${MLA[@]}")
source "$(dirname "$0")/tiny_gpt_run.bash"
Q_LORA=(--q-lora-rank 24)
DIRECT=(--normalization RMSNorm --rope-type rope --position-embedding-type rope)

run tp1 1 1 1 "${Q_LORA[@]}"
run tp2 2 2 1 "${Q_LORA[@]}"
run tp2_sp 2 2 1 --sequence-parallel "${Q_LORA[@]}"
run pp2 2 1 2 "${Q_LORA[@]}"
run tp2_pp2_sp 4 2 2 --sequence-parallel "${Q_LORA[@]}"
run cp2 2 1 1 --context-parallel-size 2 "${Q_LORA[@]}"
run tp2_flash_recompute 2 2 1 --use-flash-attn --recompute-activations "${Q_LORA[@]}"
run direct_tp1 1 1 1 "${DIRECT[@]}"
run direct_tp2_sp 2 2 1 --sequence-parallel "${DIRECT[@]}"
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/tp1.jsonl" "$WORK/direct_tp1.jsonl"
for name in tp2 tp2_sp pp2 tp2_pp2_sp cp2 tp2_flash_recompute; do
  echo "== tp1 vs $name"
  $CHECK "$WORK/tp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== direct query projection: tp1 vs tp2_sp"
$CHECK "$WORK/direct_tp1.jsonl" "$WORK/direct_tp2_sp.jsonl" --from 1 --to 6 --rtol 1e-5
echo "multi-latent attention across layouts: OK"
