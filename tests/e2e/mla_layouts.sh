#!/usr/bin/env bash
# Multi-latent attention (--multi-latent-attention with a query latent, Megatron-Core's default
# YaRN RoPE at scaling factor 1, learned absolute positions as well, values narrower than the
# query/key heads) trains to the same lm loss and grad norm (relative <= 1e-5, 6 iterations,
# dropout on) at TP 1, TP 2 (heads split, latents replicated), TP 2 with sequence parallelism
# (latents computed on sequence shards, the shared RoPE key gathered), PP 2, TP 2 x PP 2 with
# sequence parallelism (the CI configs' layout), CP 2 (RoPE at each chunk's positions, ring
# attention), and with the fused attention core and full recompute. A direct query projection
# (no --q-lora-rank) and RMSNorm with --rope-type rope also match across TP 2 + SP. A checkpoint
# resumes with --use-checkpoint-args and no MLA flags (the shape comes from its arguments) to the
# losses of an uninterrupted run, and `generate` (the KV cache of the value-padded heads) gives
# the same tokens and log-probabilities at TP 1 and TP 2; `convert` reshards it and refuses its
# HF and Megatron-LM exports by name. The model runs against PyTorch in
# tests/unit/mla_pytorch_golden_test.cpp and tests/dist/model_mla_tp_test.cpp.
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

echo "== --use-checkpoint-args: a resumed run takes the MLA shape from the checkpoint"
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0)
run whole 1 1 1 "${MLA[@]}" "${Q_LORA[@]}"
run first 1 1 1 "${MLA[@]}" "${Q_LORA[@]}" --exit-interval 6 --save "$WORK/ckpt" --save-interval 6
run resumed 1 1 1 --load "$WORK/ckpt" --use-checkpoint-args --log-args
grep -q "multi_latent_attention \.* True" "$WORK/resumed.log" || { cat "$WORK/resumed.log"; exit 1; }
$CHECK "$WORK/whole.jsonl" "$WORK/resumed.jsonl" --from 7 --to 8 --rtol 1e-5

echo "== generate: TP 1 and TP 2 give the same tokens and log-probabilities"
printf '1 2 3 4 5\n7 8\n' > "$WORK/prompts.txt"
for np in 1 2; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np \
    "$MEGATRON_BINARY" generate --load "$WORK/ckpt" --tokenizer-type NullTokenizer \
    --vocab-size 128 --prompt-file "$WORK/prompts.txt" --tokens-to-generate 6 --greedy \
    --logprobs --output-file "$WORK/gen$np.jsonl" > "$WORK/gen$np.log" 2>&1 \
    || { cat "$WORK/gen$np.log"; echo "FAIL: generate np $np"; exit 1; }
done
node -e '
  const fs = require("fs");
  const read = (f) => fs.readFileSync(f, "utf8").trim().split("\n").map(JSON.parse);
  const [a, b] = [read(process.argv[1]), read(process.argv[2])];
  if (a.length !== 2) throw new Error("expected 2 results, got " + a.length);
  a.forEach((r, i) => {
    if (r.generated_tokens.length !== 6) throw new Error("not 6 tokens: " + r.generated_tokens);
    if (JSON.stringify(r.generated_tokens) !== JSON.stringify(b[i].generated_tokens))
      throw new Error("TP 1 and TP 2 differ for prompt " + i);
    b[i].logprobs.forEach((l, j) => {
      if (Math.abs(l - r.logprobs[j]) > 1e-4 * Math.abs(r.logprobs[j])) throw new Error("logprob " + j);
    });
  });' "$WORK/gen1.jsonl" "$WORK/gen2.jsonl" || { echo "FAIL: generate TP 1 vs TP 2"; exit 1; }

echo "== convert: resharding keeps MLA; HF and Megatron-LM exports are refused by name"
"$MEGATRON_BINARY" convert --model-type gpt --to megatron --load "$WORK/ckpt" --save "$WORK/tp2" \
  --target-tensor-parallel-size 2 > "$WORK/reshard.log" 2>&1 \
  || { cat "$WORK/reshard.log"; echo "FAIL: reshard"; exit 1; }
for to in hf megatron-lm; do
  if "$MEGATRON_BINARY" convert --model-type gpt --to $to --load "$WORK/tp2" --save "$WORK/$to" \
    > "$WORK/$to.log" 2>&1; then echo "FAIL: --to $to exported an MLA model"; exit 1; fi
  grep -q "multi-latent-attention model" "$WORK/$to.log" || { cat "$WORK/$to.log"; exit 1; }
done
echo "multi-latent attention across layouts: OK"
