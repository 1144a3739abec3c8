// HuggingFace's mixture-of-experts decoders — MixtralForCausalLM, Qwen2MoeForCausalLM and
// Qwen3MoeForCausalLM — as our MoE options and parameter names (no file I/O). Their attention,
// norms and embeddings are the Llama family's (convert/hf_llama.h: Qwen2-MoE has Qwen2's q/k/v
// biases, Qwen3-MoE Qwen3's per-head QK norms); this file holds what their sparse blocks add.
//
// The routing. HF's sparse block takes p = softmax(router logits) over all E experts (fp32),
// keeps the top k, and renormalises the k weights to sum 1 (Mixtral always; Qwen when
// norm_topk_prob, which defaults to false). Renormalised, w_j = exp(l_j) / Σ_top-k exp(l_i): the
// softmax over the top k logits, Megatron's default post-softmax router; not renormalised, the
// top k of the softmax over all E: --moe-router-pre-softmax. Neither uses a score scaling, group
// limits, capacity or expert biases, so an import sets none of them and an export refuses a model
// that uses one, by flag.
//
//   HF, layer i ("model." prefix)                    ours (layers.i.mlp.)
//   Mixtral block_sparse_moe.gate.weight [E, h]    -> router.weight [E, h]
//     Qwen  mlp.gate.weight
//   Mixtral block_sparse_moe.experts.e.w1 / w3 / w2 -> experts.linear_fc1.weight [E, 2, F, h]
//     Qwen  mlp.experts.e.gate_proj / up_proj / down_proj   (gate, up) and
//                                                     experts.linear_fc2.weight [E, h, F] (down)
//   Qwen2   mlp.shared_expert.gate_proj / up_proj  -> shared_experts.linear_fc1.weight [2, S, h]
//   Qwen2   mlp.shared_expert.down_proj            -> shared_experts.linear_fc2.weight [h, S]
//   Qwen2   mlp.shared_expert_gate.weight [1, h]   -> shared_experts.gate_weight [1, h]
// Qwen's dense layers (mlp_only_layers, decoder_sparse_step) keep the Llama MLP's names.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gpt_model.h"

namespace megatron {

// True for "MixtralForCausalLM", "Qwen2MoeForCausalLM" and "Qwen3MoeForCausalLM".
bool is_hf_moe_architecture(const std::string& architecture);

// Sets config.arch.moe (and, for Mixtral, whose intermediate_size is the experts' width, nothing
// else) from the MoE keys of `architecture`'s config.json: Mixtral's num_local_experts,
// num_experts_per_tok; Qwen's num_experts, num_experts_per_tok, moe_intermediate_size,
// shared_expert_intermediate_size (Qwen2-MoE, with its sigmoid gate), norm_topk_prob,
// decoder_sparse_step and mlp_only_layers (→ --moe-layer-freq "1" or one 0/1 per layer). No
// load-balancing loss: HF's router_aux_loss_coef is a training setting (see docs/checkpoints.md).
// Throws Error naming the key when one is missing or asks for what megatron-cpp does not compute
// (router_jitter_noise > 0, no sparse layer, a Qwen2-MoE without a shared expert).
void set_moe_options_from_hf(const nlohmann::json& hf_config, const std::string& architecture,
                             GptConfig& config);

// Adds the MoE keys of `architecture` for `config` to `hf_config` (Mixtral's intermediate_size
// becomes the experts' width). Throws Error naming the flag when the model's routing or layers
// are not that architecture's (hf_moe_architecture_of's rules, a pre-softmax router for Mixtral,
// a dense layer in Mixtral, a scaling factor, groups, a capacity, sinkhorn or sigmoid scores).
void add_hf_moe_config(const GptConfig& config, const std::string& architecture,
                       nlohmann::json& hf_config);

// The HF MoE architecture whose tensor names a MoE model's tensors take: Qwen2MoeForCausalLM
// with a shared expert, Qwen3MoeForCausalLM with QK norms, else MixtralForCausalLM.
std::string hf_moe_architecture_of(const GptConfig& config);

// The HF names of MoE layer `layer`'s tensors (without "model."), for hf_moe_architecture_of.
struct HfSparseBlockNames {
  std::string router;  // [E, h]
  std::vector<std::array<std::string, 3>>
      experts;                        // per expert: gate [F, h], up [F, h], down [h, F]
  std::array<std::string, 3> shared;  // gate, up, down; empty without one
  std::string shared_gate;            // [1, h]; empty without a shared expert
};
HfSparseBlockNames hf_sparse_block_names(const GptConfig& config, int layer);

}  // namespace megatron
