#!/usr/bin/env bash
# Selective recompute of Megatron's --recompute-modules regions (docs/training.md) changes
# memory only: each region alone and several together train to the same lm loss, grad norm and
# load-balancing loss, bit for bit, as the same run keeping every activation — dropout on (the
# tiny GPT's 0.1 and 0.1, so recomputed regions must redraw the same masks) — for a dense GPT at
# TP 2 with sequence parallelism, a MoE GPT with a gated shared expert at EP 2, a MoE GPT with
# multi-latent attention at TP 2 with sequence parallelism (the MoE CI configs' module list,
# layernorm mla_up_proj mlp moe_act), and under pipeline parallelism (PP 2). Megatron's
# deprecated --moe-layer-recompute is --recompute-modules moe. Refused: mla_up_proj without
# MLA, gdn_norm_out, shared_experts with --moe-shared-expert-overlap (Megatron's rules);
# --fine-grained-activation-offloading is accepted on the CPU backend (where activations live
# in host memory already) with the same losses.
set -euo pipefail
TINY_GPT_FLAGS=(--train-iters 4 --eval-iters 0)
source "$(dirname "$0")/tiny_gpt_run.bash"
SELECTIVE=(--recompute-granularity selective --recompute-modules)
MOE=(--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 48 --moe-layer-freq '([0]+[1]*3)'
  --moe-shared-expert-intermediate-size 32 --moe-shared-expert-gate --moe-grouped-gemm
  --moe-aux-loss-coeff 1e-2)
MLA=(--multi-latent-attention --q-lora-rank 24 --kv-lora-rank 16 --qk-head-dim 16
  --qk-pos-emb-head-dim 8 --v-head-dim 16 --position-embedding-type rope --rope-type rope
  --normalization RMSNorm --swiglu --disable-bias-linear)

# same BASELINE NAME: the two runs' metrics are equal bit for bit.
same() {
  echo "== $1 vs $2"
  $CHECK "$WORK/$1.jsonl" "$WORK/$2.jsonl" --from 1 --to 4 --exact
}

# Dense GPT, TP 2 with sequence parallelism.
DENSE=(--sequence-parallel)
run dense 2 2 1 "${DENSE[@]}"
for modules in layernorm mlp "layernorm mlp core_attn"; do
  name="dense_${modules// /_}"
  # shellcheck disable=SC2086  # the module list splits into words on purpose
  run "$name" 2 2 1 "${DENSE[@]}" "${SELECTIVE[@]}" $modules
  same dense "$name"
done

# MoE with a gated shared expert, EP 2.
run moe 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}"
for modules in layernorm moe shared_experts "moe_act shared_experts layernorm mlp"; do
  name="moe_${modules// /_}"
  # shellcheck disable=SC2086
  run "$name" 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}" "${SELECTIVE[@]}" $modules
  same moe "$name"
done
run moe_layer_recompute 2 1 1 --expert-model-parallel-size 2 "${MOE[@]}" --moe-layer-recompute
same moe moe_layer_recompute

# MoE with multi-latent attention, TP 2 with sequence parallelism.
run mla 2 2 1 --sequence-parallel "${MOE[@]}" "${MLA[@]}"
for modules in mla_up_proj "layernorm mla_up_proj mlp moe_act"; do
  name="mla_${modules// /_}"
  # shellcheck disable=SC2086
  run "$name" 2 2 1 --sequence-parallel "${MOE[@]}" "${MLA[@]}" "${SELECTIVE[@]}" $modules
  same mla "$name"
done
run mla_offload 2 2 1 --sequence-parallel "${MOE[@]}" "${MLA[@]}" "${SELECTIVE[@]}" \
  layernorm mla_up_proj mlp moe_act --fine-grained-activation-offloading \
  --offload-modules expert_fc1 moe_act attn_norm mlp_norm qkv_linear core_attn attn_proj
same mla mla_offload

# Pipeline parallelism: two stages, MoE with MLA, every region at once.
run pp 2 1 2 "${MOE[@]}" "${MLA[@]}"
run pp_all 2 1 2 "${MOE[@]}" "${MLA[@]}" "${SELECTIVE[@]}" core_attn layernorm mla_up_proj mlp \
  moe shared_experts moe_act
same pp pp_all

# refused CASE MESSAGE FLAGS...: the command stops before training, saying MESSAGE.
refused() {
  local name=$1 message=$2
  shift 2
  if timeout 120 "$MEGATRON_BINARY" pretrain-gpt --num-layers 2 --hidden-size 64 \
    --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --mock-data \
    --vocab-size 128 --micro-batch-size 2 --global-batch-size 2 --lr 1e-3 --train-iters 1 \
    "$@" > "$WORK/$name.log" 2>&1; then
    cat "$WORK/$name.log"; echo "FAIL: $name was accepted"; exit 1
  fi
  grep -qF -- "$message" "$WORK/$name.log" \
    || { cat "$WORK/$name.log"; echo "FAIL: no sentence on $name"; exit 1; }
}
refused mla_up_proj "--recompute-modules mla_up_proj needs --multi-latent-attention" \
  "${SELECTIVE[@]}" mla_up_proj
refused gdn_norm_out "--recompute-modules gdn_norm_out needs --experimental-attention-variant gdn" \
  "${SELECTIVE[@]}" gdn_norm_out
refused shared_overlap "--recompute-modules shared_experts cannot work with --moe-shared-expert-overlap" \
  --num-experts 4 --moe-shared-expert-intermediate-size 32 --moe-shared-expert-overlap \
  "${SELECTIVE[@]}" shared_experts
echo "selective recompute of every module: OK"
