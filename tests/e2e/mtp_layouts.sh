#!/usr/bin/env bash
# Multi-token prediction (--mtp-num-layers, docs/model.md) trains to the same lm loss, grad
# norm and `mtp_k loss` values (relative <= 1e-5, 6 iterations, dropout on) at TP 1, TP 2, TP 2
# with sequence parallelism, DP 2, PP 2 (the depths on the last stage, with its copy of the
# input embedding), TP 2 x PP 2 with sequence parallelism, full recompute (of the decoder), DP 2
# with --overlap-grad-reduce and the distributed optimizer, the
# per-token loss at DP 2 x PP 2 as at 1 process, and a --pipeline-model-parallel-layout
# that places the `m` with the loss: two depths on a learned-position GPT with tied embeddings,
# one depth on a RoPE model with an untied output layer, and one depth whose layer is a mixture
# of experts (the decoder's last layer is one) at EP 2. A checkpoint resumes at another layout
# to the losses of an uninterrupted run, `generate` loads it (the depths unused), an HF export
# leaves the depths out with a warning and a Megatron-LM export is refused. The model
# runs against PyTorch in tests/unit/model_mtp_golden_test.cpp.
set -euo pipefail
TINY_GPT_FLAGS=(--train-iters 6 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"
MTP2=(--mtp-num-layers 2 --mtp-loss-scaling-factor 0.3)
ROPE=(--mtp-num-layers 1 "${TINY_LLAMA[@]}")
MOE=(--mtp-num-layers 1 --mtp-loss-scaling-factor 0.5 --num-experts 4 --moe-router-topk 2
  --moe-ffn-hidden-size 48 --moe-aux-loss-coeff 1e-2 --moe-layer-freq '([0]+[1]*3)'
  --moe-token-dispatcher-type alltoall)

compare() {  # compare REFERENCE CANDIDATE...
  local ref=$1
  shift
  for name in "$@"; do
    echo "== $ref vs $name"
    $CHECK "$WORK/$ref.jsonl" "$WORK/$name.jsonl" --from 1 --to 6 --rtol 1e-5
  done
}

run mtp2_tp1 1 1 1 "${MTP2[@]}"
grep -q "lm loss: .* | mtp_1 loss: .* | mtp_2 loss: " "$WORK/mtp2_tp1.log" \
  || { cat "$WORK/mtp2_tp1.log"; echo "FAIL: the MTP losses are not logged"; exit 1; }
run mtp2_tp2 2 2 1 "${MTP2[@]}"
run mtp2_tp2_sp 2 2 1 --sequence-parallel "${MTP2[@]}"
run mtp2_dp2 2 1 1 "${MTP2[@]}"
run mtp2_pp2 2 1 2 "${MTP2[@]}"
run mtp2_tp2_pp2_sp 4 2 2 --sequence-parallel "${MTP2[@]}"
run mtp2_recompute 1 1 1 --recompute-activations "${MTP2[@]}"
run mtp2_dp2_overlap 2 1 1 --overlap-grad-reduce --use-distributed-optimizer "${MTP2[@]}"
compare mtp2_tp1 mtp2_tp2 mtp2_tp2_sp mtp2_dp2 mtp2_pp2 mtp2_tp2_pp2_sp mtp2_recompute \
  mtp2_dp2_overlap
run per_token_tp1 1 1 1 --calculate-per-token-loss "${MTP2[@]}"
run per_token_dp2_pp2 4 1 2 --calculate-per-token-loss "${MTP2[@]}"
compare per_token_tp1 per_token_dp2_pp2

run rope_tp1 1 1 1 "${ROPE[@]}"
run rope_tp2_sp 2 2 1 --sequence-parallel "${ROPE[@]}"
run rope_pp2_layout 2 1 2 --pipeline-model-parallel-layout 'Et*2|t*2mL' "${ROPE[@]}"
run rope_pp2_vpp 4 2 2 --sequence-parallel --pipeline-model-parallel-layout 'Et|t|t|tmL' \
  "${ROPE[@]}"
compare rope_tp1 rope_tp2_sp rope_pp2_layout rope_pp2_vpp

run moe_tp1 1 1 1 "${MOE[@]}"
run moe_ep2 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}"
run moe_tp2_sp_pp2 4 2 2 --sequence-parallel "${MOE[@]}"
compare moe_tp1 moe_ep2 moe_tp2_sp_pp2

echo "== a TP 1 checkpoint resumes at TP 2 x PP 2 with the MTP depths from its arguments"
TINY_GPT_FLAGS=(--train-iters 8 --eval-iters 0)
run whole 1 1 1 "${MTP2[@]}"
run first 1 1 1 "${MTP2[@]}" --exit-interval 6 --save "$WORK/ckpt" --save-interval 6
run resumed 4 2 2 --load "$WORK/ckpt" --use-checkpoint-args
$CHECK "$WORK/whole.jsonl" "$WORK/resumed.jsonl" --from 7 --to 8 --rtol 1e-5
run resumed_same 1 1 1 "${MTP2[@]}" --load "$WORK/ckpt"
$CHECK "$WORK/whole.jsonl" "$WORK/resumed_same.jsonl" --from 7 --to 8 --exact

echo "== generate loads the checkpoint and ignores the depths"
printf '1 2 3 4 5\n' > "$WORK/prompts.txt"
timeout 300 "$MEGATRON_BINARY" generate --load "$WORK/ckpt" --tokenizer-type NullTokenizer \
  --vocab-size 128 --prompt-file "$WORK/prompts.txt" --tokens-to-generate 4 --greedy \
  --output-file "$WORK/gen.jsonl" > "$WORK/gen.log" 2>&1 \
  || { cat "$WORK/gen.log"; echo "FAIL: generate"; exit 1; }
grep -q generated_tokens "$WORK/gen.jsonl" || { cat "$WORK/gen.log"; echo "FAIL: no tokens"; exit 1; }

echo "== convert: HF export leaves the depths out and says so; Megatron-LM export is refused"
"$MEGATRON_BINARY" convert --model-type gpt --from megatron --to hf --load "$WORK/ckpt" \
  --save "$WORK/hf" > "$WORK/hf.log" 2>&1 || { cat "$WORK/hf.log"; echo "FAIL: HF export"; exit 1; }
grep -q "multi-token-prediction depths (mtp.\*, --mtp-num-layers) are not exported" "$WORK/hf.log" \
  || { cat "$WORK/hf.log"; echo "FAIL: no warning about the MTP depths"; exit 1; }
if "$MEGATRON_BINARY" convert --model-type gpt --from megatron --to megatron-lm-core \
  --load "$WORK/ckpt" --save "$WORK/mlm" > "$WORK/mlm.log" 2>&1; then
  echo "FAIL: the Megatron-LM export of an MTP checkpoint was not refused"; exit 1
fi
grep -q "has multi-token prediction (--mtp-num-layers): its export to Megatron-LM's format is not implemented" \
  "$WORK/mlm.log" || { cat "$WORK/mlm.log"; echo "FAIL: the refusal's message"; exit 1; }
echo "multi-token prediction across layouts: OK"
