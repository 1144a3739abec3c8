#!/usr/bin/env bash
# Muon (--optimizer muon, docs/training.md; optim/muon.h) with the flags of Megatron-LM's MoE
# Muon CI configs (momentum 0.9, spectral scale, extra scale factor 0.2) on a tiny MoE GPT with
# SwiGLU, grouped-query attention (2 query groups: the fused QKV is split into Q, K and V rows)
# and learned positions: it trains to the same lm loss, grad norm and load-balancing loss
# (relative <= 1e-5, 6 iterations, dropout on) at TP 1, TP 2 (the matrices gathered over TP),
# TP 4 (the QKV replicated: 2 groups on 4 ranks), TP 2 with sequence parallelism, PP 2, DP 2,
# EP 2, DP 2 with --optimizer dist_muon (the momentum sharded over DP), EP 2 x DP 4 with it (the
# dense momentum sharded over DP 4, the experts' over their expert data-parallel pair) and
# TP 2 x PP 2. A TP 1
# checkpoint resumes at TP 2 x DP 2 with the distributed optimizer (the momentum resharded on
# load) to the losses of the uninterrupted run, and at TP 1 bit for bit, as a bf16 run at TP 2
# does; a resume with --optimizer adam is refused. Adam
# trains otherwise (the flag is seen), and unsupported choices are refused by name. The update
# runs against PyTorch in tests/unit/optim_muon_pytorch_golden_test.cpp.
set -euo pipefail
MODEL=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2
  --moe-grouped-gemm --moe-token-dispatcher-type alltoall --moe-router-dtype fp32 --swiglu
  --disable-bias-linear --group-query-attention --num-query-groups 2 --ffn-hidden-size 96)
MUON=(--optimizer muon --muon-momentum 0.9 --muon-extra-scale-factor 0.2
  --muon-scale-mode spectral)
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"

run tp1 1 1 1 "${MODEL[@]}" "${MUON[@]}"
run tp2 2 2 1 "${MODEL[@]}" "${MUON[@]}"
run tp4 4 4 1 "${MODEL[@]}" "${MUON[@]}"
run tp2_sp 2 2 1 --sequence-parallel "${MODEL[@]}" "${MUON[@]}"
run pp2 2 1 2 "${MODEL[@]}" "${MUON[@]}"
run dp2 2 1 1 "${MODEL[@]}" "${MUON[@]}"
run ep2 2 1 1 --expert-model-parallel-size 2 "${MODEL[@]}" "${MUON[@]}"
run dp2_dist_muon 2 1 1 "${MODEL[@]}" "${MUON[@]}" --optimizer dist_muon
run ep2_dp4_dist_muon 4 1 1 --expert-model-parallel-size 2 "${MODEL[@]}" "${MUON[@]}" \
  --optimizer dist_muon
run tp2_pp2 4 2 2 "${MODEL[@]}" "${MUON[@]}"
run tp1_adam 1 1 1 "${MODEL[@]}"
node "$MEGATRON_SOURCE_DIR/tests/e2e/loss_decreases.js" 6 "$WORK/tp1.jsonl"
grep -q "dist_muon is deprecated" "$WORK/dp2_dist_muon.log" \
  || { cat "$WORK/dp2_dist_muon.log"; echo "FAIL: dist_muon was not recognised"; exit 1; }
for name in tp2 tp4 tp2_sp pp2 dp2 ep2 dp2_dist_muon ep2_dp4_dist_muon tp2_pp2; do
  echo "== tp1 vs $name"
  $CHECK "$WORK/tp1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
echo "== with Adam the training differs"
if $CHECK "$WORK/tp1.jsonl" "$WORK/tp1_adam.jsonl" --from 2 --to 6 --rtol 1e-3 \
  > "$WORK/adam.log" 2>&1; then
  echo "FAIL: --optimizer muon changed nothing"; exit 1
fi

echo "== a TP 1 checkpoint resumes at TP 2 x DP 2 with the distributed optimizer"
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0)
run whole 1 1 1 "${MODEL[@]}" "${MUON[@]}"
run first 1 1 1 "${MODEL[@]}" "${MUON[@]}" --exit-interval 5 --save "$WORK/ckpt" --save-interval 5
run resumed 4 2 1 "${MODEL[@]}" "${MUON[@]}" --use-distributed-optimizer --load "$WORK/ckpt"
$CHECK "$WORK/whole.jsonl" "$WORK/resumed.jsonl" --from 6 --to 8 --rtol 1e-5
echo "== at the same layout the resume is bit for bit, also with bf16 parameters (fp32 master)"
run resumed_tp1 1 1 1 "${MODEL[@]}" "${MUON[@]}" --load "$WORK/ckpt"
$CHECK "$WORK/whole.jsonl" "$WORK/resumed_tp1.jsonl" --from 6 --to 8 --exact
run bf16_whole 2 2 1 --bf16 "${MODEL[@]}" "${MUON[@]}"
run bf16_first 2 2 1 --bf16 "${MODEL[@]}" "${MUON[@]}" --exit-interval 5 --save "$WORK/bf16" \
  --save-interval 5
run bf16_resumed 2 2 1 --bf16 "${MODEL[@]}" "${MUON[@]}" --load "$WORK/bf16"
$CHECK "$WORK/bf16_whole.jsonl" "$WORK/bf16_resumed.jsonl" --from 6 --to 8 --exact

# Each refusal: exit non-zero before training, naming the flag.
refused() {
  local expect=$1
  shift
  if "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 --num-attention-heads 4 \
    --seq-length 32 --max-position-embeddings 32 --mock-data --vocab-size 128 \
    --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --train-iters 2 "$@" \
    > "$WORK/refused.log" 2>&1; then
    cat "$WORK/refused.log"; echo "FAIL: accepted $*"; exit 1
  fi
  grep -q -- "$expect" "$WORK/refused.log" \
    || { cat "$WORK/refused.log"; echo "FAIL: the refusal of $* does not say '$expect'"; exit 1; }
}
echo "== refusals"
refused "--optimizer sgd is not implemented" --optimizer sgd
refused "--optimizer adaptive_muon is not implemented" --optimizer adaptive_muon
refused "--muon-tp-mode blockwise is not implemented" --optimizer muon --muon-tp-mode blockwise
refused "--muon-scalar-optimizer lion is not implemented" --optimizer muon \
  --muon-scalar-optimizer lion
refused "--optimizer muon with --fp16 is refused" --optimizer muon --fp16
refused "--muon-scale-mode 'spectal'" --optimizer muon --muon-scale-mode spectal
refused "--muon-coefficient-type 'custom'" --optimizer muon --muon-coefficient-type custom
refused "was saved by --optimizer muon" --load "$WORK/ckpt" "${MODEL[@]}" --num-layers 4 \
  --global-batch-size 8 --train-iters 8
echo "Muon across layouts: OK"
