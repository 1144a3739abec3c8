// HuggingFace Llama-family decoders <-> our GPT parameters: config and tensor layouts (no file
// I/O). LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM share one
// layout (Qwen2 adds q/k/v biases, Qwen3 a per-head RMSNorm of queries and keys); they map onto the
// GPT model with the Llama architecture options (RoPE, RMSNorm, SwiGLU, grouped-query attention, no
// linear biases, untied output layer). Their mixture-of-experts forms MixtralForCausalLM (Mistral's
// attention), Qwen2MoeForCausalLM (Qwen2's) and Qwen3MoeForCausalLM (Qwen3's) replace the MLP of
// their sparse layers by a routed block: the MoE options and those tensors are convert/hf_moe.h's.
//
//   HF ("model." prefix)                        ours
//   embed_tokens.weight [V, h]               -> embedding.word_embeddings.weight [Vp, h]
//   layers.i.input_layernorm.weight          -> layers.i.input_layernorm.weight
//   layers.i.self_attn.{q,k,v}_proj.weight   -> layers.i.self_attention.query_key_value.weight
//     [heads·d, h], [g·d, h], [g·d, h]            [g·(q+2)·d, h]: per KV group its q = heads/g
//                                                 query heads, its key, its value
//   layers.i.self_attn.{q,k,v}_proj.bias     -> layers.i.self_attention.query_key_value.bias
//   layers.i.self_attn.{q,k}_norm.weight [d] -> layers.i.self_attention.{q,k}_layernorm.weight
//   layers.i.self_attn.o_proj.weight         -> layers.i.self_attention.dense.weight
//   layers.i.post_attention_layernorm.weight -> layers.i.post_attention_layernorm.weight
//   layers.i.mlp.{gate,up}_proj.weight [F, h] -> layers.i.mlp.dense_h_to_4h.weight [2, F, h]
//   layers.i.mlp.down_proj.weight            -> layers.i.mlp.dense_4h_to_h.weight
//   norm.weight                              -> final_layernorm.weight
//   lm_head.weight [V, h]                    -> output_layer.weight [Vp, h] (absent when tied)
//   (MoE layers: layers.i.mlp.router / experts.* / shared_experts.*, see convert/hf_moe.h)
// Vocabulary rows are padded with zeros on import and cut on export. Both directions move
// values exactly (permutations of rows), so import → export returns the same numbers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "convert/hf_tensor.h"
#include "model/gpt_model.h"

namespace megatron {

// The config's architecture when it is one of the Llama family ("LlamaForCausalLM", ...), or ""
// (by "architectures", else "model_type").
std::string hf_llama_architecture(const nlohmann::json& hf_config);

// GptConfig from an HF Llama/Mistral/Qwen2 config.json (num_hidden_layers, hidden_size,
// num_attention_heads, num_key_value_heads, head_dim, intermediate_size, vocab_size,
// max_position_embeddings, rms_norm_eps, rope_theta, rope_scaling (linear only),
// partial_rotary_factor, tie_word_embeddings, attention_dropout, initializer_range). Throws
// Error naming the key when one is missing or asks for something the model does not compute
// (hidden_act other than silu, attention or MLP biases on Llama, other RoPE scalings). A
// Mistral (or Mixtral) sliding window shorter than max_position_embeddings caps
// max_position_embeddings: within the window, windowed attention is full causal attention. The MoE
// architectures' keys set arch.moe (set_moe_options_from_hf).
GptConfig gpt_config_from_hf_llama(const nlohmann::json& hf_config, int64_t padded_vocab_size);
// The config.json of `architecture` ("LlamaForCausalLM", "MistralForCausalLM",
// "Qwen2ForCausalLM", "Qwen3ForCausalLM", or with experts "MixtralForCausalLM",
// "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM") for `config`; Error naming the flag the
// architecture cannot express.
nlohmann::json hf_llama_config_from_gpt(const GptConfig& config, const std::string& architecture);

// HF tensors (any float dtype, names with or without "model.") -> our full logical f32
// tensors. Throws one Error listing every missing, unexpected and wrongly shaped tensor.
TensorMap gpt_tensors_from_hf_llama(const TensorMap& hf, const GptConfig& config);
// Our full logical tensors (values or gradients, f32) -> HF tensors, names with "model." (and
// lm_head.weight when untied).
TensorMap hf_llama_tensors_from_gpt(const TensorMap& ours, const GptConfig& config);

}  // namespace megatron
