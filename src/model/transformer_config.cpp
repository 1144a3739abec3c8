#include "model/transformer_config.h"

#include <cmath>

#include "core/error.h"

namespace megatron {

PositionEmbedding position_embedding_from_name(const std::string& name) {
  for (PositionEmbedding p :
       {PositionEmbedding::kLearnedAbsolute, PositionEmbedding::kRope, PositionEmbedding::kNone})
    if (name == position_embedding_name(p)) return p;
  MT_THROW("--position-embedding-type must be learned_absolute, rope or none, got '", name, "'");
}

const char* position_embedding_name(PositionEmbedding p) {
  switch (p) {
    case PositionEmbedding::kRope:
      return "rope";
    case PositionEmbedding::kNone:
      return "none";
    default:
      return "learned_absolute";
  }
}

Normalization normalization_from_name(const std::string& name) {
  for (Normalization n : {Normalization::kLayerNorm, Normalization::kRMSNorm})
    if (name == normalization_name(n)) return n;
  MT_THROW("--normalization must be LayerNorm or RMSNorm, got '", name, "'");
}

const char* normalization_name(Normalization n) {
  return n == Normalization::kRMSNorm ? "RMSNorm" : "LayerNorm";
}

RecomputeMethod recompute_method_from_name(const std::string& name) {
  if (name == "uniform") return RecomputeMethod::kUniform;
  if (name == "block") return RecomputeMethod::kBlock;
  MT_THROW("--recompute-method '", name, "' is not known: expected uniform or block");
}

void validate_recompute_method(RecomputeMethod method, int num_layers) {
  MT_REQUIRE(num_layers >= 1, "--recompute-num-layers must be at least 1, got ", num_layers);
  MT_REQUIRE(method == RecomputeMethod::kBlock || num_layers == 1,
             "--recompute-method uniform recomputes one layer at a time here, so "
             "--recompute-num-layers must be 1 (got ",
             num_layers, "); to recompute only some layers use --recompute-method block");
}

double mup_width_mult(const MupOptions& mup, int64_t hidden_size) {
  if (!mup.enabled || mup.base_hidden_size <= 0) return 1.0;
  return double(hidden_size) / double(mup.base_hidden_size);
}

float TransformerConfig::logit_mult() const {
  if (!arch.mup.enabled) return 1.0f;
  // Megatron sets 1/m only when the multiplier was left at its default of 1.
  if (arch.mup.output_mult == 1.0f) return float(1.0 / mup_width_mult());
  return arch.mup.output_mult;
}

float TransformerConfig::hidden_init_std() const {
  return float(double(init_method_std) / std::sqrt(mup_width_mult()));
}

float TransformerConfig::output_layer_init_std() const {
  return hidden_init_std() / std::sqrt(2.0f * float(num_layers));
}

float TransformerConfig::softmax_scale() const {
  const MupOptions& m = arch.mup;
  if (!m.enabled) return 1.0f / std::sqrt(float(head_dim()));
  return float(std::sqrt(m.base_head_dim.value_or(1.0)) /
               std::pow(double(head_dim()), m.attn_scale_power));
}

void TransformerConfig::validate(int tp_size) const {
  MT_REQUIRE(num_layers > 0, "--num-layers must be positive, got ", num_layers);
  MT_REQUIRE(hidden_size > 0 && num_attention_heads > 0, "--hidden-size (", hidden_size,
             ") and --num-attention-heads (", num_attention_heads, ") must be positive");
  MT_REQUIRE(arch.kv_channels > 0 || hidden_size % num_attention_heads == 0, "--hidden-size ",
             hidden_size, " is not divisible by --num-attention-heads ", num_attention_heads,
             " (or set --kv-channels)");
  MT_REQUIRE(arch.kv_channels >= 0, "--kv-channels must be positive, got ", arch.kv_channels);
  const int64_t g = query_groups();
  MT_REQUIRE(g > 0 && num_attention_heads % g == 0, "--num-query-groups ", g,
             " does not divide --num-attention-heads ", num_attention_heads,
             "; use a divisor of the head count");
  MT_REQUIRE(g % tp_size == 0 || tp_size % g == 0, "--num-query-groups ", g,
             " and --tensor-model-parallel-size ", tp_size,
             " must divide one another (KV groups are split across TP ranks, or replicated "
             "when there are fewer groups than ranks)");
  MT_REQUIRE(num_attention_heads % tp_size == 0, "--num-attention-heads ", num_attention_heads,
             " is not divisible by --tensor-model-parallel-size ", tp_size);
  MT_REQUIRE(ffn_size() % tp_size == 0, "--ffn-hidden-size ", ffn_size(),
             " is not divisible by --tensor-model-parallel-size ", tp_size);
  validate_recompute_method(recompute_method, recompute_num_layers);
  MT_REQUIRE(!(arch.squared_relu && arch.swiglu),
             "--squared-relu and --swiglu are two MLP activations: give one of them");
  MT_REQUIRE(!arch.rotary_interleaved || arch.position_embedding == PositionEmbedding::kRope,
             "--rotary-interleaved needs --position-embedding-type rope");
  MT_REQUIRE(hidden_dropout >= 0 && hidden_dropout < 1, "--hidden-dropout must be in [0, 1), got ",
             hidden_dropout);
  MT_REQUIRE(attention_dropout >= 0 && attention_dropout < 1,
             "--attention-dropout must be in [0, 1), got ", attention_dropout);
  MT_REQUIRE(arch.mup.base_hidden_size >= 0, "--mup-base-hidden-size must be positive, got ",
             arch.mup.base_hidden_size);
  MT_REQUIRE(!arch.mup.base_head_dim || *arch.mup.base_head_dim > 0,
             "--mup-base-head-dim must be positive, got ", arch.mup.base_head_dim.value_or(0));
  if (arch.position_embedding == PositionEmbedding::kRope) {
    MT_REQUIRE(arch.rotary_percent > 0 && arch.rotary_percent <= 1,
               "--rotary-percent must be in (0, 1], got ", arch.rotary_percent);
    MT_REQUIRE(rotary_dim() >= 2 && rotary_dim() % 2 == 0, "RoPE rotates ", rotary_dim(),
               " channels of each head (--kv-channels ", head_dim(), " x --rotary-percent ",
               arch.rotary_percent, "); it must be a positive even number");
    MT_REQUIRE(arch.rotary_base > 0, "--rotary-base must be positive, got ", arch.rotary_base);
    MT_REQUIRE(arch.rotary_seq_len_interpolation_factor > 0,
               "--rotary-seq-len-interpolation-factor must be positive, got ",
               arch.rotary_seq_len_interpolation_factor);
    const kernels::Llama3RopeScaling& rs = arch.rope_scaling;
    MT_REQUIRE(!rs.enabled() || rs.factor >= 1, "--rope-scaling-factor must be >= 1, got ",
               rs.factor);
    MT_REQUIRE(
        !rs.enabled() || (rs.low_freq_factor > 0 && rs.high_freq_factor > rs.low_freq_factor &&
                          rs.original_max_position_embeddings > 0),
        "Llama 3 RoPE scaling needs 0 < low_freq_factor (", rs.low_freq_factor,
        ") < high_freq_factor (", rs.high_freq_factor,
        ") and original_max_position_embeddings > 0 (", rs.original_max_position_embeddings, ")");
  } else {
    MT_REQUIRE(!arch.rope_scaling.enabled(),
               "--use-rope-scaling scales RoPE frequencies: it needs --position-embedding-type "
               "rope");
  }
  MT_REQUIRE(!(apply_residual_connection_post_layernorm &&
               layernorm_order == LayerNormOrder::kPostLayerNorm),
             "--apply-residual-connection-post-layernorm applies to the pre-LayerNorm order only");
}

}  // namespace megatron
