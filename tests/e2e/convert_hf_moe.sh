#!/usr/bin/env bash
# HF mixture-of-experts models in and out (docs/checkpoints.md, convert/hf_moe.h). For each tiny
# fixture of tools/reference/hf_moe_reference.py — MixtralForCausalLM (every layer sparse, top 2
# renormalised), Qwen2MoeForCausalLM (q/k/v biases, a gated shared expert, top 2 not
# renormalised: --moe-router-pre-softmax, a dense layer from mlp_only_layers) and
# Qwen3MoeForCausalLM (QK norms, norm_topk_prob, a dense layer from decoder_sparse_step):
#  * `convert --from hf` at TP 1 and TP 2 writes the MoE flags into the checkpoint's arguments;
#  * one training step of the import (--use-checkpoint-args, no architecture flag) on the fixture's
#    document gives PyTorch's loss (relative <= 1e-4) and gradient norm (<= 1e-3) at EP 1, EP 2,
#    TP 2 and TP 2 x EP 2, under mpirun;
#  * import -> export gives the fixture's model.safetensors and config.json byte for byte, from
#    the TP 1 and TP 2 imports and from the checkpoint the TP 2 x EP 2 step saved (--lr 0: the
#    weights unchanged, gathered from the expert-parallel layout);
#  * `generate` runs from the import at TP 2.
# Then the refusals: an HF config megatron-cpp cannot compute (router_jitter_noise) and a model
# whose routing HF cannot express (a pre-softmax router as Mixtral), each a sentence naming it.
set -euo pipefail
: "${MEGATRON_BINARY:?}" "${MEGATRON_SOURCE_DIR:?}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMP_NUM_THREADS=1
fail() { echo "FAIL: $*"; exit 1; }
quiet() {  # quiet LOG COMMAND...: runs it, printing its output only when it fails
  local log=$1
  shift
  "$@" > "$log" 2>&1 || { cat "$log"; fail "$*"; }
}
convert() { quiet "$WORK/convert.log" "$MEGATRON_BINARY" convert --model-type gpt "$@"; }

# One step on the fixture's document (2 sequences of 16 tokens: the global batch), from CKPT.
step() {  # step NAME NP TP EP CKPT [FLAGS...]
  local name=$1 np=$2 tp=$3 ep=$4 ckpt=$5
  shift 5
  local dp=$((np / tp))
  quiet "$WORK/$name.log" timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none \
    -np "$np" "$MEGATRON_BINARY" pretrain-gpt --use-checkpoint-args --load "$ckpt" --finetune \
    --data-path "$WORK/$fixture/doc_text_document" --split 100,0,0 \
    --tokenizer-type NullTokenizer --vocab-size 64 --make-vocab-size-divisible-by 32 \
    --seq-length 16 --micro-batch-size $((2 / dp)) --global-batch-size 2 --train-iters 1 \
    --lr 0 --min-lr 0 --hidden-dropout 0 --attention-dropout 0 --log-interval 1 \
    --eval-iters 0 --eval-interval 1000 --tensor-model-parallel-size "$tp" \
    --expert-model-parallel-size "$ep" --metrics-file "$WORK/$fixture/$name.jsonl" "$@"
}
# The step's lm loss and grad norm against the reference's.
check_golden() {  # check_golden NAME
  node -e '
    const fs = require("fs");
    const golden = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const train = fs.readFileSync(process.argv[2], "utf8").split("\n").filter(l => l.trim())
      .map(l => JSON.parse(l)).find(r => r.iteration === 1 && r.lm_loss !== undefined);
    if (!train) { console.log("no iteration 1 in " + process.argv[2]); process.exit(1); }
    const rel = (a, b) => Math.abs(a - b) / Math.abs(b);
    const loss = rel(train.lm_loss, golden.loss), norm = rel(train.grad_norm, golden.grad_norm);
    console.log(`${process.argv[3]}: loss ${train.lm_loss} (PyTorch ${golden.loss}, ${loss.toExponential(2)}), ` +
                `grad norm ${train.grad_norm} (PyTorch ${golden.grad_norm}, ${norm.toExponential(2)})`);
    if (!(loss <= 1e-4 && norm <= 1e-3)) process.exit(1);
  ' "$FIXTURE/golden.json" "$WORK/$fixture/$1.jsonl" "$fixture $1" || fail "$fixture $1 against PyTorch"
}
round_trip() {  # round_trip CKPT: its HF export is the fixture, byte for byte
  rm -rf "$WORK/$fixture/hf_out"
  convert --from megatron --to hf --load "$1" --save "$WORK/$fixture/hf_out"
  cmp "$FIXTURE/hf/model.safetensors" "$WORK/$fixture/hf_out/model.safetensors" \
    || fail "$fixture: the tensors exported from $1 are not the fixture's"
  cmp "$FIXTURE/hf/config.json" "$WORK/$fixture/hf_out/config.json" \
    || fail "$fixture: the config.json exported from $1 is not the fixture's"
}

for fixture in mixtral qwen2_moe qwen3_moe; do
  FIXTURE="$MEGATRON_SOURCE_DIR/tests/data/${fixture}_tiny"
  mkdir -p "$WORK/$fixture"
  echo "== $fixture: import at TP 1 and TP 2"
  quiet "$WORK/preprocess.log" "$MEGATRON_BINARY" preprocess --input "$FIXTURE/document.jsonl" \
    --output-prefix "$WORK/$fixture/doc" --tokenizer-type NullTokenizer --vocab-size 64
  for tp in 1 2; do
    convert --from hf --load "$FIXTURE/hf" --save "$WORK/$fixture/tp$tp" \
      --target-tensor-parallel-size "$tp" --make-vocab-size-divisible-by 32
  done
  grep -rqE '"num_experts": ?4' "$WORK/$fixture/tp1" || fail "$fixture: no num_experts recorded"

  echo "== $fixture: one step against PyTorch at EP 1, EP 2, TP 2, TP 2 x EP 2"
  step ep1 1 1 1 "$WORK/$fixture/tp1"
  step ep2 2 1 2 "$WORK/$fixture/tp1"
  step tp2 2 2 1 "$WORK/$fixture/tp2"
  step tp2_ep2 4 2 2 "$WORK/$fixture/tp2" --save "$WORK/$fixture/saved_tp2_ep2" --save-interval 1
  for name in ep1 ep2 tp2 tp2_ep2; do check_golden "$name"; done

  echo "== $fixture: import -> export is byte-identical"
  round_trip "$WORK/$fixture/tp1"
  round_trip "$WORK/$fixture/tp2"
  round_trip "$WORK/$fixture/saved_tp2_ep2"

  echo "== $fixture: generate from the import at TP 2"
  quiet "$WORK/generate.log" timeout 300 mpirun --oversubscribe --allow-run-as-root --bind-to none \
    -np 2 "$MEGATRON_BINARY" generate --load "$WORK/$fixture/tp2" --tensor-model-parallel-size 2 \
    --tokenizer-type NullTokenizer --vocab-size 64 --make-vocab-size-divisible-by 32 \
    --tokens-to-generate 6 --top-k 1 --prompt "1 2 3" --output-file "$WORK/$fixture/generated.jsonl"
  [[ -s $WORK/$fixture/generated.jsonl ]] || fail "$fixture: nothing generated"
done

echo "== refusals"
mkdir -p "$WORK/jitter"
cp "$MEGATRON_SOURCE_DIR/tests/data/mixtral_tiny/hf/model.safetensors" "$WORK/jitter/"
sed 's/"router_jitter_noise": 0.0/"router_jitter_noise": 0.01/' \
  "$MEGATRON_SOURCE_DIR/tests/data/mixtral_tiny/hf/config.json" > "$WORK/jitter/config.json"
if "$MEGATRON_BINARY" convert --model-type gpt --from hf --load "$WORK/jitter" \
     --save "$WORK/jitter_ckpt" > "$WORK/err.log" 2>&1; then
  fail "router_jitter_noise imported"
fi
grep -q "router_jitter_noise = 0.01 is not supported" "$WORK/err.log" || { cat "$WORK/err.log"; fail "message"; }
# A pre-softmax router (Megatron's --moe-router-pre-softmax) is not Mixtral's renormalised top k.
quiet "$WORK/pre_softmax.log" "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 32 \
  --num-attention-heads 4 --seq-length 16 --max-position-embeddings 64 --mock-data \
  --vocab-size 64 --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --lr 1e-3 \
  --position-embedding-type rope --normalization RMSNorm --swiglu --disable-bias-linear \
  --untie-embeddings-and-output-weights --num-experts 4 --moe-router-topk 2 \
  --moe-router-pre-softmax --eval-iters 0 --save "$WORK/pre_softmax" --save-interval 1
if "$MEGATRON_BINARY" convert --model-type gpt --from megatron --to hf --load "$WORK/pre_softmax" \
     --save "$WORK/pre_softmax_hf" > "$WORK/err.log" 2>&1; then
  fail "a pre-softmax router exported as Mixtral"
fi
grep -q "MixtralForCausalLM renormalises the top-k routing weights" "$WORK/err.log" \
  || { cat "$WORK/err.log"; fail "message"; }
echo "hf moe convert: OK"
