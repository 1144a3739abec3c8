// TransformerConfig: the shape and options of a transformer stack, shared by GPT and BERT.
// Nothing here is GPT-specific: the mask type, the LayerNorm order and the final LayerNorm
// are options.
#pragma once

#include <cstdint>
#include <string>

namespace megatron {

enum class AttnMaskType {
  kCausal,   // GPT: key j > query i is masked
  kPadding,  // BERT: bidirectional, keys marked as padding are masked
};

enum class LayerNormOrder {
  // GPT-2 and Megatron-LM: x → LN → attn → +x → LN → MLP → +·
  kPreLayerNorm,
  // the original BERT: x → attn → +x → LN → MLP → +· → LN
  kPostLayerNorm,
};

struct TransformerConfig {
  int num_layers = 0;
  int64_t hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t ffn_hidden_size = 0;  // 0 → 4 · hidden_size
  float hidden_dropout = 0.1f;
  float attention_dropout = 0.1f;
  float init_method_std = 0.02f;
  float layernorm_epsilon = 1e-5f;
  AttnMaskType attn_mask_type = AttnMaskType::kCausal;
  LayerNormOrder layernorm_order = LayerNormOrder::kPreLayerNorm;
  // Megatron's --apply-residual-connection-post-layernorm (pre-LN only): the residual
  // branches start from the LayerNorm outputs instead of the LayerNorm inputs.
  bool apply_residual_connection_post_layernorm = false;
  bool final_layernorm = true;  // pre-LN stacks end with a LayerNorm ("final_layernorm")
  bool recompute_activations = false;
  std::string name_prefix;  // prepended to every parameter name ("" for GPT)

  int64_t ffn_size() const { return ffn_hidden_size > 0 ? ffn_hidden_size : 4 * hidden_size; }
  // std/√(2L) for the two residual-branch output projections (attention dense, dense_4h_to_h).
  float output_layer_init_std() const;
  // Throws Error naming the option when the shape does not fit the TP size.
  void validate(int tp_size) const;
};

}  // namespace megatron
