#!/usr/bin/env bash
# Aux-loss-free load balancing (--moe-router-enable-expert-bias, docs/moe.md): the same training
# (sigmoid routing with the expert bias moved by --moe-router-bias-update-rate after every step,
# the per-sequence loss, dropout on, the flex dispatcher) gives the same lm loss, grad norm and
# load-balancing loss (relative <= 1e-5, 6 iterations) at EP 1, EP 2, TP 2 with sequence
# parallelism, PP 2, DP 2 and EP 2 x TP 2 — the counts are summed over the data-parallel ranks,
# so the bias is the global batch's at every layout — and other losses than without the bias
# from the second iteration on (the first routes with a zero bias). A checkpoint saved at EP 2
# holds each router's expert_bias and resumes bit for bit at EP 2 and, resharded, at TP 2 x PP 2
# to the losses of an uninterrupted run. Selective recompute of the attention core and the
# experts' activation (--recompute-modules core_attn moe_act) gives the same losses bit for bit.
# The flex dispatcher logs that alltoall runs in its place; the bias with softmax scores is
# refused. The kernels: tests/unit/model_moe_expert_bias_test.cpp. The other recompute
# modules: recompute_modules.sh.
set -euo pipefail
BIAS=(--num-experts 4 --moe-router-topk 2 --moe-router-score-function sigmoid
  --moe-router-enable-expert-bias --moe-router-bias-update-rate 1e-2 --moe-ffn-hidden-size 48
  --moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-3
  --moe-layer-freq '([0]+[1]*3)' --moe-token-dispatcher-type flex
  --moe-flex-dispatcher-backend deepep)
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"

run ep1 1 1 1 "${BIAS[@]}"
run ep2 2 1 1 --expert-model-parallel-size 2 "${BIAS[@]}"
run tp2_sp 2 2 1 --sequence-parallel "${BIAS[@]}"
run pp2 2 1 2 "${BIAS[@]}"
run dp2 2 1 1 "${BIAS[@]}"
run ep2_tp2_sp 4 2 1 --sequence-parallel --expert-model-parallel-size 2 "${BIAS[@]}"
# Selective recompute of the attention core and the experts' activation changes memory only.
run recompute 1 1 1 --recompute-granularity selective --recompute-modules core_attn moe_act \
  --moe-grouped-gemm "${BIAS[@]}"
echo "== ep1 vs recompute (--recompute-modules core_attn moe_act)"
$CHECK "$WORK/ep1.jsonl" "$WORK/recompute.jsonl" --from 1 --to 6 --exact
grep -q -- "--moe-token-dispatcher-type flex (deepep) has no effect here" "$WORK/ep1.log" \
  || { cat "$WORK/ep1.log"; echo "FAIL: no note on the flex dispatcher"; exit 1; }
for name in ep2 tp2_sp pp2 dp2 ep2_tp2_sp; do
  echo "== ep1 vs $name"
  $CHECK "$WORK/ep1.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
done
NO_BIAS=()
for flag in "${BIAS[@]}"; do [[ $flag == --moe-router-enable-expert-bias ]] || NO_BIAS+=("$flag"); done
run no_bias 1 1 1 "${NO_BIAS[@]}"
echo "== the bias routes other tokens from the second iteration on"
$CHECK "$WORK/ep1.jsonl" "$WORK/no_bias.jsonl" --from 1 --to 1 --exact
if $CHECK "$WORK/ep1.jsonl" "$WORK/no_bias.jsonl" --from 2 --to 6 --rtol 1e-7 > /dev/null 2>&1; then
  echo "FAIL: the expert bias changed no loss"; exit 1
fi

echo "== checkpoints with the expert bias, resumed and resharded"
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0)
run whole 1 1 1 "${BIAS[@]}"
run whole_ep2 2 1 1 --expert-model-parallel-size 2 "${BIAS[@]}"
run first_ep2 2 1 1 --expert-model-parallel-size 2 "${BIAS[@]}" --exit-interval 4 \
  --save "$WORK/ckpt" --save-interval 4
for layer in 1 2 3; do
  grep -aq "\"layers.$layer.mlp.router.expert_bias\"" "$WORK"/ckpt/iter_0000004/mp_rank_00/model.safetensors \
    || { echo "FAIL: no expert_bias of layer $layer in the checkpoint"; exit 1; }
done
run resumed_ep2 2 1 1 --expert-model-parallel-size 2 "${BIAS[@]}" --load "$WORK/ckpt"
$CHECK "$WORK/whole_ep2.jsonl" "$WORK/resumed_ep2.jsonl" --from 5 --to 8 --exact
run resumed_tp2_pp2 4 2 2 --sequence-parallel "${BIAS[@]}" --load "$WORK/ckpt"
$CHECK "$WORK/whole.jsonl" "$WORK/resumed_tp2_pp2.jsonl" --from 5 --to 8 --rtol 1e-5

if timeout 120 "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 \
  --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --mock-data \
  --vocab-size 128 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --train-iters 1 \
  --num-experts 4 --moe-router-enable-expert-bias > "$WORK/softmax.log" 2>&1; then
  cat "$WORK/softmax.log"; echo "FAIL: the expert bias with softmax scores was accepted"; exit 1
fi
grep -qF -- "--moe-router-enable-expert-bias adds its bias to sigmoid scores" "$WORK/softmax.log" \
  || { cat "$WORK/softmax.log"; echo "FAIL: no sentence on the softmax scores"; exit 1; }
echo "aux-loss-free balancing across layouts: OK"
