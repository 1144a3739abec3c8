// HuggingFace GPT-2 <-> our GPT parameters: config and tensor layouts (no file I/O).
//
// HF GPT-2 (GPT2LMHeadModel) stores Conv1D weights as [in, out] and the fused attention
// projection c_attn with columns [Q; K; V] (each [heads, head_dim]). We store Linear weights
// as [out, in] and the fused QKV rows per head, [heads, 3, head_dim], so that a row split
// gives each tensor-parallel rank whole heads. The word embedding is padded with zero rows to
// the padded vocabulary on import and truncated to the real one on export; the LM head is
// tied to it on both sides.
//
//   HF (optionally prefixed "transformer.")       ours
//   wte.weight [V, h]                          -> embedding.word_embeddings.weight [Vp, h]
//   wpe.weight [P, h]                          -> embedding.position_embeddings.weight
//   h.i.ln_1.{weight,bias}                     -> layers.i.input_layernorm.{weight,bias}
//   h.i.attn.c_attn.weight [h, 3h], bias [3h]  -> layers.i.self_attention.query_key_value.*
//   h.i.attn.c_proj.weight [h, h], bias        -> layers.i.self_attention.dense.* (transposed)
//   h.i.ln_2.{weight,bias}                     -> layers.i.post_attention_layernorm.*
//   h.i.mlp.c_fc.weight [h, f], bias           -> layers.i.mlp.dense_h_to_4h.* (transposed)
//   h.i.mlp.c_proj.weight [f, h], bias         -> layers.i.mlp.dense_4h_to_h.* (transposed)
//   ln_f.{weight,bias}                         -> final_layernorm.{weight,bias}
// Ignored on import: h.i.attn.bias and h.i.attn.masked_bias (causal-mask buffers) and
// lm_head.weight (checked to equal wte.weight: untied heads are not supported).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "convert/hf_tensor.h"
#include "core/tensor.h"
#include "model/gpt_model.h"

namespace megatron {

// GptConfig from an HF GPT-2 config.json (n_layer, n_embd, n_head, n_inner, vocab_size,
// n_positions, layer_norm_epsilon, resid_pdrop, attn_pdrop). Throws Error naming the key
// when one is missing or has a value our model does not compute (e.g. an activation_function
// other than a GeLU, convert/hf_gelu.h). seq_length is set to n_positions.
GptConfig gpt_config_from_hf(const nlohmann::json& hf_config, int64_t padded_vocab_size);
// The HF GPT-2 config.json of `config`; throws Error when its architecture options are not
// GPT-2's (config.json could not describe them).
nlohmann::json hf_config_from_gpt(const GptConfig& config);

// HF tensors (any float dtype) -> our full logical f32 tensors. Throws one Error listing every
// missing, unexpected and wrongly shaped tensor.
TensorMap gpt_tensors_from_hf(const TensorMap& hf, const GptConfig& config);
// Our full logical tensors (values or gradients, f32) -> HF tensors, names without prefix.
TensorMap hf_tensors_from_gpt(const TensorMap& ours, const GptConfig& config);

}  // namespace megatron
