#!/usr/bin/env bash
# Mixture of experts (docs/moe.md) trains to the same lm loss, grad norm, load-balancing loss
# and z-loss (relative <= 1e-5, 6 iterations, dropout on, aux loss and z-loss on) at TP 1,
# TP 2 (experts split like the MLP), TP 2 with sequence parallelism, PP 2, DP 2 (also with the
# distributed optimizer), TP 2 x PP 2 with sequence parallelism, and with full recompute; the
# first layer stays dense (--moe-layer-freq as a Python list). A second model (sigmoid scores,
# group-limited top-4, a scaling factor, the per-sequence loss, SwiGLU experts, a shared
# expert, and --moe-router-pre-softmax, which sigmoid scores ignore as in Megatron) and a third
# (pre-softmax, capacity factor 1 with padding) match across TP 2 + SP and PP 2, and a fourth
# (Sinkhorn-balanced top-1 routing, a shared expert with its sigmoid gate) across TP 2 + SP,
# PP 2 and DP 2. A TP 1 checkpoint resumes at TP 2 x PP 2 (resharded on load, the MoE shape from its
# arguments) to the losses of an uninterrupted run, and `generate` gives the same tokens at
# TP 1 and TP 2. The layer runs against PyTorch in tests/unit/model_moe_golden_test.cpp and
# tests/dist/model_moe_tp_test.cpp.
set -euo pipefail
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2
  --moe-z-loss-coeff 1e-3 --moe-layer-freq '([0]+[1]*3)' --moe-grouped-gemm
  --moe-token-dispatcher-type alltoall --moe-router-dtype fp32)
SIGMOID=(--num-experts 8 --moe-router-topk 4 --moe-router-score-function sigmoid
  --moe-router-num-groups 4 --moe-router-group-topk 2 --moe-router-topk-scaling-factor 2.5
  --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-2 --moe-ffn-hidden-size 32
  --moe-shared-expert-intermediate-size 64 --swiglu --disable-bias-linear --moe-router-pre-softmax)
CAPACITY=(--num-experts 4 --moe-router-topk 2 --moe-router-pre-softmax --moe-aux-loss-coeff 1e-2
  --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity)
SINKHORN=(--num-experts 4 --moe-router-topk 1 --moe-router-load-balancing-type sinkhorn
  --moe-ffn-hidden-size 48 --moe-shared-expert-intermediate-size 64 --moe-shared-expert-gate)
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"

run tp1 1 1 1 "${MOE[@]}"
run tp2 2 2 1 "${MOE[@]}"
run tp2_sp 2 2 1 --sequence-parallel "${MOE[@]}"
run pp2 2 1 2 "${MOE[@]}"
run dp2 2 1 1 "${MOE[@]}"
run dp2_distopt 2 1 1 --use-distributed-optimizer "${MOE[@]}"
run tp2_pp2_sp 4 2 2 --sequence-parallel "${MOE[@]}"
run tp2_recompute 2 2 1 --recompute-activations "${MOE[@]}"
grep -q "load_balancing_loss: .* | z_loss: " "$WORK/tp1.log" \
  || { cat "$WORK/tp1.log"; echo "FAIL: the MoE losses are not logged"; exit 1; }
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/tp1.jsonl"
for name in tp2 tp2_sp pp2 dp2 dp2_distopt tp2_pp2_sp tp2_recompute; do
  echo "== tp1 vs $name"
  $CHECK "$WORK/tp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
for variant in SIGMOID CAPACITY SINKHORN; do
  declare -n flags=$variant
  run "${variant}_tp1" 1 1 1 "${flags[@]}"
  run "${variant}_tp2_sp" 2 2 1 --sequence-parallel "${flags[@]}"
  run "${variant}_pp2" 2 1 2 "${flags[@]}"
  layouts=(tp2_sp pp2)
  if [[ $variant == SINKHORN ]]; then  # balanced over each micro-batch: the same at DP 2
    run "${variant}_dp2" 2 1 1 "${flags[@]}"
    layouts+=(dp2)
  fi
  for layout in "${layouts[@]}"; do
    echo "== $variant: tp1 vs $layout"
    $CHECK "$WORK/${variant}_tp1.jsonl" "$WORK/${variant}_$layout.jsonl" --from 1 --to 6 --rtol 1e-5
  done
done
grep -q "seq_load_balancing_loss: " "$WORK/SIGMOID_tp1.log" \
  || { cat "$WORK/SIGMOID_tp1.log"; echo "FAIL: seq_load_balancing_loss is not logged"; exit 1; }

echo "== a TP 1 checkpoint resumes at TP 2 x PP 2 with the MoE shape from its arguments"
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0)
run whole 1 1 1 "${MOE[@]}"
run first 1 1 1 "${MOE[@]}" --exit-interval 6 --save "$WORK/ckpt" --save-interval 6
run resumed 4 2 2 --load "$WORK/ckpt" --use-checkpoint-args --moe-aux-loss-coeff 1e-2 \
  --moe-z-loss-coeff 1e-3
$CHECK "$WORK/whole.jsonl" "$WORK/resumed.jsonl" --from 7 --to 8 --rtol 1e-5

echo "== generate: TP 1 and TP 2 give the same tokens"
printf '1 2 3 4 5\n7 8\n' > "$WORK/prompts.txt"
for np in 1 2; do
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np $np \
    "$MEGATRON_BINARY" generate --load "$WORK/ckpt" --tokenizer-type NullTokenizer \
    --vocab-size 128 --prompt-file "$WORK/prompts.txt" --tokens-to-generate 6 --greedy \
    --output-file "$WORK/gen$np.jsonl" > "$WORK/gen$np.log" 2>&1 \
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
  });' "$WORK/gen1.jsonl" "$WORK/gen2.jsonl" || { echo "FAIL: generate TP 1 vs TP 2"; exit 1; }
echo "mixture of experts across layouts: OK"
