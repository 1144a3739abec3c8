// megatron-cpp's tensor names ↔ Megatron-Core's ShardedTensor keys, the DCP keys of Megatron-LM's
// torch_dist format (checkpoint/megatron_lm_torch_dist.h reads it, megatron_lm_torch_dist_writer.h
// writes it), for GPT-family models: dense, mixture-of-experts, QK-norm and multi-token-prediction
// layers. Megatron-Core's keys are global (whole over TP, PP and EP); megatron-cpp's names carry
// global layer numbers.
//
//   megatron-cpp                              Megatron-Core key (global shape)
//   embedding.word_embeddings.weight         embedding.word_embeddings.weight
//   output_layer.weight, final_layernorm.*   output_layer.weight, decoder.final_layernorm.*
//   layers.i.<ours>                          decoder.layers.<core> [L, ...] (stacked: layer i at
//                                            index i of the leading axis), or, when the layers
//                                            are not homogeneous (--moe-layer-freq other than 1:
//                                            TransformerBlock.sharded_state_dict), one key per
//                                            layer, decoder.layers.i.<core>, without that axis
//   mtp.layers.d.{enorm,hnorm,final_layernorm}.*, mtp.layers.d.eh_proj.weight   the same
//   mtp.layers.d.transformer_layer.<ours>    mtp.layers.d.transformer_layer.<core> (never stacked)
// <core> of <ours>: the dense layer's names (checkpoint/megatron_lm_torch.h, Transformer Engine's
// fused norms), and, under the same names on both sides,
//   self_attention.{q,k}_layernorm.*         QK norms [d]
//   mlp.router.weight [E, h], mlp.router.expert_bias [E] (a persistent buffer; f32)
//   mlp.experts.linear_fc1.* [E, ...], mlp.experts.linear_fc2.* [E, ...]   every expert on the
//                                            expert axis (TEGroupedMLP, the legacy GroupedMLP and
//                                            SequentialMLP all emit these keys: experts.py)
//   mlp.shared_experts.linear_fc{1,2}.*, mlp.shared_experts.gate_weight [1, h]
//   self_attention.linear_{q_proj,q_down_proj,q_up_proj,kv_down_proj,kv_up_proj}.weight   multi-
//                                            latent attention's projections (Megatron's MLA layer
//                                            spec with --qk-layernorm, Transformer Engine's)
// except that a MoE layer's pre-MLP norm is Megatron-Core's separate pre_mlp_layernorm.* (no
// linear_fc1 to fuse it into), and in an MLA layer the input norm is Megatron-Core's separate
// input_layernorm.* and the latent norms q_layernorm.* / kv_layernorm.* are Transformer Engine's
// fused linear_q_up_proj.layer_norm_* / linear_kv_up_proj.layer_norm_*. SwiGLU's linear_fc1 —
// dense, shared or per expert — is megatron-cpp's [..., 2, ffn, ...] (gate, up) and Megatron's
// [..., 2·ffn, ...]: the same elements.
//
// MLA's rope channels: megatron-cpp rotates a head's rope channel pairs (j, j + dr/2); Megatron-
// Core's MLA (apply_rotary_pos_emb with mla_rotary_interleaved, as HF DeepSeek) rotates the
// stored channels (2j, 2j + 1). So the rows that make the rope channels — each head's last dr
// rows of linear_q_up_proj / linear_q_proj, the last dr rows of linear_kv_down_proj — are stored
// permuted: Megatron's row dn + 2j is megatron-cpp's dn + j, its dn + 2j + 1 megatron-cpp's
// dn + dr/2 + j (dn: the content rows before them). Queries and keys rotate alike, so the
// attention scores — the function — are the same.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "core/tensor.h"
#include "model/moe_options.h"
#include "model/transformer_config.h"

namespace megatron {

// Whether Megatron-Core writes one key per layer (non-homogeneous layers): MoE layers mixed with
// dense ones by --moe-layer-freq (any value but 1, a list included).
bool megatron_core_per_layer_keys(const MoeOptions& moe);

// What the writer needs beyond a tensor's name.
struct MegatronCoreKeyContext {
  bool per_layer_keys = false;
  // megatron-cpp's prefixes of the MoE layers ("layers.3.", "mtp.layers.0.transformer_layer."):
  // those whose MLP has a router.
  std::set<std::string> moe_layers;
  MlaOptions mla;  // enabled: every layer's attention is multi-latent
};

// Where megatron-cpp's tensor `name` of full shape `full_shape` goes.
struct MegatronCoreKey {
  std::string key;
  int64_t layer = -1;  // >= 0: a stacked key; the tensor's index on its leading layer axis
  // >= 0: SwiGLU's linear_fc1: megatron-cpp's axes merge_axis and merge_axis + 1 ([2, ffn]) are
  // Megatron's one axis [2·ffn].
  int merge_axis = -1;
};
std::optional<MegatronCoreKey> megatron_core_key(const std::string& name, const Shape& full_shape,
                                                 const MegatronCoreKeyContext& context);

// The inverse: megatron-cpp's name of Megatron-Core key `key` — for a stacked key its
// layer-local name, `stacked` set — or nullopt when no GPT-family model of megatron-cpp has it.
struct MegatronCppName {
  std::string name;
  bool stacked = false;  // name is layer-local: the key carries every layer on axis 0
};
std::optional<MegatronCppName> megatron_cpp_name(const std::string& key);

// Whether megatron-cpp's tensor `name` holds MLA rope rows stored permuted (above).
bool megatron_core_permutes_rows(const std::string& name, const MlaOptions& mla);
// Megatron-Core's row of megatron-cpp's row `row` (of the full tensor) of such a tensor `name`.
int64_t megatron_core_row(const std::string& name, int64_t row, const MlaOptions& mla);
// Megatron-Core's full tensor `t` (rows on dim 0) as megatron-cpp's: a row-permuted copy when
// `name` permutes rows, else `t`.
Tensor megatron_cpp_rows(const std::string& name, const Tensor& t, const MlaOptions& mla);

}  // namespace megatron
