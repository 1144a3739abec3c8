#!/usr/bin/env bash
# A Llama-style GPT end to end with Megatron-Core's flags (RoPE with Llama 3.1's scaling,
# RMSNorm, SwiGLU, 8 heads in 2 KV groups, untied output layer, no biases; dropout on): the same losses and grad norms at
# TP1·DP1, TP2·DP2 (KV groups split) and TP4·DP1 (KV groups replicated) for 8 iterations
# (relative <= 1e-5); exact resume from iteration 4 (bit for bit) and a resume at TP 4;
# export to HF LlamaForCausalLM, re-import, export again (byte-identical), train from the
# import with --use-checkpoint-args, and generate from the checkpoint with the flags taken
# from it.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }

LLAMA=(--num-layers 2 --hidden-size 64 --num-attention-heads 8 --ffn-hidden-size 96
       --position-embedding-type rope --rotary-base 500000 --use-rope-scaling
       --rope-scaling-factor 8 --normalization RMSNorm
       --norm-epsilon 1e-6 --swiglu --group-query-attention --num-query-groups 2
       --untie-embeddings-and-output-weights --disable-bias-linear)
run() {  # run NAME NP TP [FLAGS...]
  local name=$1 np=$2 tp=$3
  shift 3
  timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np "$np" \
    "$MEGATRON_BINARY" pretrain-gpt "${LLAMA[@]}" --seq-length 32 --max-position-embeddings 64 \
    --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
    --micro-batch-size 2 --global-batch-size 8 --train-iters 8 \
    --lr 1e-3 --lr-warmup-iters 2 --lr-decay-style cosine --min-lr 1e-4 --weight-decay 0.1 \
    --seed 42 --tensor-model-parallel-size "$tp" --log-interval 1 \
    --eval-interval 1000 --eval-iters 0 --metrics-file "$WORK/$name.jsonl" "$@" \
    > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; fail "run $name"; }
}
CHECK="node $MEGATRON_SOURCE_DIR/tests/e2e/compare_metrics.js"

run tp1 1 1 --save "$WORK/ckpt_full" --save-interval 4
run tp2_dp2 4 2
run tp4 4 4
for name in tp2_dp2 tp4; do
  echo "== tp1 vs $name"
  $CHECK "$WORK/tp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 8 --rtol 1e-5
done
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 8 "$WORK/tp1.jsonl"

echo "== exact resume from iteration 4"
run first_half 1 1 --save "$WORK/ckpt" --save-interval 4 --exit-interval 4
cp -r "$WORK/ckpt" "$WORK/ckpt_tp4"
run resumed 1 1 --load "$WORK/ckpt"
$CHECK "$WORK/tp1.jsonl" "$WORK/resumed.jsonl" --from 5 --to 8 --exact
run resumed_tp4 4 4 --load "$WORK/ckpt_tp4"
$CHECK "$WORK/tp1.jsonl" "$WORK/resumed_tp4.jsonl" --from 5 --to 8 --rtol 1e-5

echo "== export to HF, re-import, export again"
convert() { "$MEGATRON_BINARY" convert --model-type gpt "$@" > "$WORK/convert.log" 2>&1 \
              || { cat "$WORK/convert.log"; fail "convert $*"; }; }
convert --from megatron --to hf --load "$WORK/ckpt_full" --save "$WORK/hf"
grep -q '"LlamaForCausalLM"' "$WORK/hf/config.json" || fail "architecture"
grep -q '"num_key_value_heads": 2' "$WORK/hf/config.json" || fail "num_key_value_heads"
grep -q '"rope_type": "llama3"' "$WORK/hf/config.json" || fail "rope_scaling"
convert --from hf --load "$WORK/hf" --save "$WORK/imported" --target-tensor-parallel-size 2 \
  --make-vocab-size-divisible-by 32
convert --from megatron --to hf --load "$WORK/imported" --save "$WORK/hf_again"
cmp "$WORK/hf/model.safetensors" "$WORK/hf_again/model.safetensors" || fail "round trip"
cmp "$WORK/hf/config.json" "$WORK/hf_again/config.json" || fail "config.json round trip"

echo "== pretrain-gpt from the HF import with --use-checkpoint-args (no architecture flags)"
timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" pretrain-gpt --use-checkpoint-args --load "$WORK/imported" --finetune \
  --seq-length 32 --mock-data --vocab-size 128 --make-vocab-size-divisible-by 32 \
  --micro-batch-size 2 --global-batch-size 4 --train-iters 2 --lr 1e-4 --log-interval 1 \
  --eval-interval 1000 --eval-iters 0 --tensor-model-parallel-size 2 --save "$WORK/from_hf" \
  --log-args \
  > "$WORK/from_hf.log" 2>&1 || { cat "$WORK/from_hf.log"; fail "pretrain from the import"; }
grep -q "position_embedding_type .* rope" "$WORK/from_hf.log" || fail "flags not taken"
grep -q "num_query_groups .* 2" "$WORK/from_hf.log" || fail "groups not taken"
# Trained after the import, exported: still the imported config.json, byte for byte.
convert --from megatron --to hf --load "$WORK/from_hf" --save "$WORK/hf_trained"
cmp "$WORK/hf/config.json" "$WORK/hf_trained/config.json" || fail "config.json after training"

echo "== generate from the checkpoint (flags from its arguments), TP 2"
timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 \
  "$MEGATRON_BINARY" generate --load "$WORK/ckpt_full" --tensor-model-parallel-size 2 \
  --tokenizer-type NullTokenizer \
  --vocab-size 128 --tokens-to-generate 8 --top-k 1 --prompt "1 2 3" \
  --output-file "$WORK/generated.jsonl" > "$WORK/generate.log" 2>&1 \
  || { cat "$WORK/generate.log"; fail "generate"; }
[[ -s $WORK/generated.jsonl ]] || fail "nothing generated"
echo "== contradictory architecture flags are named before training starts"
if "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 8 \
     --seq-length 32 --mock-data --vocab-size 128 --micro-batch-size 2 --train-iters 2 --lr 1e-3 \
     --group-query-attention --num-query-groups 3 > "$WORK/err.log" 2>&1; then
  fail "no error for 3 query groups of 8 heads"
fi
grep -q -- "--num-query-groups 3 does not divide --num-attention-heads 8" "$WORK/err.log" \
  || { cat "$WORK/err.log"; fail "message"; }
echo "llama pretrain: OK"
