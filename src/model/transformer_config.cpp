#include "model/transformer_config.h"

#include <cmath>

#include "core/error.h"

namespace megatron {

float TransformerConfig::output_layer_init_std() const {
  return init_method_std / std::sqrt(2.0f * float(num_layers));
}

void TransformerConfig::validate(int tp_size) const {
  MT_REQUIRE(num_layers > 0, "--num-layers must be positive, got ", num_layers);
  MT_REQUIRE(hidden_size > 0 && num_attention_heads > 0, "--hidden-size (", hidden_size,
             ") and --num-attention-heads (", num_attention_heads, ") must be positive");
  MT_REQUIRE(hidden_size % num_attention_heads == 0, "--hidden-size ", hidden_size,
             " is not divisible by --num-attention-heads ", num_attention_heads);
  MT_REQUIRE(num_attention_heads % tp_size == 0, "--num-attention-heads ", num_attention_heads,
             " is not divisible by --tensor-model-parallel-size ", tp_size);
  MT_REQUIRE(ffn_size() % tp_size == 0, "--ffn-hidden-size ", ffn_size(),
             " is not divisible by --tensor-model-parallel-size ", tp_size);
  MT_REQUIRE(hidden_dropout >= 0 && hidden_dropout < 1, "--hidden-dropout must be in [0, 1), got ",
             hidden_dropout);
  MT_REQUIRE(attention_dropout >= 0 && attention_dropout < 1,
             "--attention-dropout must be in [0, 1), got ", attention_dropout);
  MT_REQUIRE(!(apply_residual_connection_post_layernorm &&
               layernorm_order == LayerNormOrder::kPostLayerNorm),
             "--apply-residual-connection-post-layernorm applies to the pre-LayerNorm order only");
}

}  // namespace megatron
