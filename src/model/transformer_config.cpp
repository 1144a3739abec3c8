#include "model/transformer_config.h"

#include <cmath>

#include "core/error.h"

namespace megatron {

PositionEmbedding position_embedding_from_name(const std::string& name) {
  for (PositionEmbedding p : {PositionEmbedding::kLearnedAbsolute, PositionEmbedding::kRope,
                              PositionEmbedding::kYarn, PositionEmbedding::kNone})
    if (name == position_embedding_name(p)) return p;
  MT_THROW("--position-embedding-type must be learned_absolute, rope, yarn or none, got '", name,
           "'");
}

const char* position_embedding_name(PositionEmbedding p) {
  switch (p) {
    case PositionEmbedding::kRope:
      return "rope";
    case PositionEmbedding::kYarn:
      return "yarn";
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
  // Megatron-Core's MLA corrects its softmax for YaRN's attention temperature whatever its
  // --rope-type (1 at scaling factor 1); other attention does not (its YaRN scales cos/sin only).
  const MupOptions& mup = arch.mup;
  const double m =
      arch.mla.enabled ? kernels::yarn_mscale(arch.yarn.factor, arch.yarn.mscale_all_dim) : 1.0;
  if (mup.enabled)
    return float(m * m * std::sqrt(mup.base_head_dim.value_or(1.0)) /
                 std::pow(double(head_dim()), mup.attn_scale_power));
  return arch.mla.enabled ? float(m * m / std::sqrt(double(head_dim())))
                          : 1.0f / std::sqrt(float(head_dim()));
}

std::optional<kernels::YarnRopeScaling> TransformerConfig::yarn_rope() const {
  const bool yarn =
      arch.mla.enabled ? arch.mla.yarn : arch.position_embedding == PositionEmbedding::kYarn;
  return yarn ? std::optional(arch.yarn) : std::nullopt;
}

namespace {

void validate_mla(const TransformerConfig& c) {
  const MlaOptions& m = c.arch.mla;
  MT_REQUIRE(m.q_lora_rank >= 0 && m.kv_lora_rank > 0 && m.qk_head_dim > 0 && m.v_head_dim > 0,
             "--multi-latent-attention needs positive --kv-lora-rank (", m.kv_lora_rank,
             "), --qk-head-dim (", m.qk_head_dim, ") and --v-head-dim (", m.v_head_dim,
             ") and a --q-lora-rank that is positive or absent (", m.q_lora_rank, ")");
  MT_REQUIRE(m.qk_pos_emb_head_dim >= 2 && m.qk_pos_emb_head_dim % 2 == 0,
             "--qk-pos-emb-head-dim must be a positive even number (RoPE rotates channel pairs), "
             "got ",
             m.qk_pos_emb_head_dim);
  MT_REQUIRE(m.v_head_dim <= c.head_dim(), "--v-head-dim ", m.v_head_dim,
             " must not exceed --qk-head-dim + --qk-pos-emb-head-dim = ", c.head_dim(),
             " (values are zero-padded to the query/key head size for the attention core)");
  MT_REQUIRE(c.arch.yarn.original_max_position_embeddings == 4096.0f &&
                 c.arch.yarn.beta_fast == 32.0f && c.arch.yarn.beta_slow == 1.0f &&
                 c.arch.yarn.round_to_int,
             "--multi-latent-attention takes YaRN's original context, betas and rounding from "
             "Megatron-Core's defaults (4096, 32, 1, rounded), whatever the --yarn-* flags say "
             "(they configure --position-embedding-type yarn): drop the --yarn-* flags");
  MT_REQUIRE(!m.yarn || !c.arch.rotary_interleaved,
             "YaRN RoPE (--rope-type yarn, MLA's default) does not rotate interleaved channel "
             "pairs (as in Megatron-Core): drop --rotary-interleaved or use --rope-type rope");
  MT_REQUIRE(c.arch.num_query_groups == 0,
             "--group-query-attention and --multi-latent-attention exclude one another (as in "
             "Megatron-LM): give one of them");
  MT_REQUIRE(!c.arch.add_qkv_bias,
             "--multi-latent-attention has no projection biases: drop --add-qkv-bias");
  MT_REQUIRE(c.arch.rotary_percent == 1.0f && c.arch.rotary_seq_len_interpolation_factor == 1.0f &&
                 !c.arch.rope_scaling.enabled(),
             "--multi-latent-attention rotates its whole --qk-pos-emb-head-dim part at the "
             "positions themselves: --rotary-percent, --rotary-seq-len-interpolation-factor and "
             "--use-rope-scaling are not implemented with it");
}

void validate_yarn(const TransformerConfig& c) {
  const kernels::YarnRopeScaling& y = c.arch.yarn;
  MT_REQUIRE(
      y.factor > 0 && y.original_max_position_embeddings > 0 && y.beta_fast > 0 && y.beta_slow > 0,
      "YaRN needs a positive --rotary-scaling-factor (", y.factor,
      "), --yarn-original-max-position-embeddings (", y.original_max_position_embeddings,
      "), --yarn-beta-fast (", y.beta_fast, ") and --yarn-beta-slow (", y.beta_slow, ")");
  if (c.arch.position_embedding != PositionEmbedding::kYarn || c.arch.mla.enabled) return;
  MT_REQUIRE(!c.arch.rotary_interleaved,
             "--position-embedding-type yarn does not rotate interleaved channel pairs (as in "
             "Megatron-Core): drop --rotary-interleaved");
  MT_REQUIRE(c.arch.rotary_percent == 1.0f && c.arch.rotary_seq_len_interpolation_factor == 1.0f &&
                 !c.arch.rope_scaling.enabled(),
             "--position-embedding-type yarn rotates whole heads at YaRN's own frequencies "
             "(Megatron-Core's YaRN ignores the others): drop --rotary-percent, "
             "--rotary-seq-len-interpolation-factor and --use-rope-scaling");
}

void validate_dsa(const TransformerConfig& c) {
  const DsaOptions& d = c.arch.dsa;
  MT_REQUIRE(c.arch.mla.enabled,
             "--experimental-attention-variant dsa selects the keys of multi-latent attention's "
             "queries: it needs --multi-latent-attention");
  MT_REQUIRE(!c.arch.add_bias_linear,
             "--experimental-attention-variant dsa runs Megatron-Core's absorbed MLA, which has "
             "no linear biases: add --disable-bias-linear");
  MT_REQUIRE(d.indexer_heads > 0 && d.indexer_head_dim > 0 && d.topk > 0,
             "--experimental-attention-variant dsa needs positive --dsa-indexer-n-heads (",
             d.indexer_heads, "), --dsa-indexer-head-dim (", d.indexer_head_dim,
             ") and --dsa-indexer-topk (", d.topk, ")");
  MT_REQUIRE(d.indexer_head_dim >= c.arch.mla.qk_pos_emb_head_dim, "--dsa-indexer-head-dim ",
             d.indexer_head_dim, " must hold the indexer's RoPE part, --qk-pos-emb-head-dim ",
             c.arch.mla.qk_pos_emb_head_dim);
  MT_REQUIRE(!d.rotate_activation || (d.indexer_head_dim & (d.indexer_head_dim - 1)) == 0,
             "--dsa-indexer-head-dim ", d.indexer_head_dim,
             " is not a power of two, where the indexer's Hadamard rotation (on by default) is "
             "not orthogonal: use a power of two or --no-dsa-indexer-rotate-activation");
  MT_REQUIRE(d.loss_coeff >= 0, "--dsa-indexer-loss-coeff must be >= 0, got ", d.loss_coeff);
  MT_REQUIRE(d.k_norm_epsilon >= 0, "--dsa-indexer-k-norm-epsilon must be > 0, got ",
             d.k_norm_epsilon);
  MT_REQUIRE(!(d.rope_interleaved && c.arch.rotary_interleaved),
             "--dsa-indexer-rope-interleaved and --rotary-interleaved together interleave the "
             "indexer's RoPE channels twice; give one of them");
}

}  // namespace

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
  MT_REQUIRE(cp_comm_type.size() == 1 || cp_comm_type.size() == size_t(num_layers),
             "--cp-comm-type gives ", cp_comm_type.size(), " types for --num-layers ", num_layers,
             ": give one for every layer, or one per layer");
  MT_REQUIRE(!(arch.squared_relu && arch.swiglu),
             "--squared-relu and --swiglu are two MLP activations: give one of them");
  MT_REQUIRE(!arch.rotary_interleaved || attention_rope(),
             "--rotary-interleaved needs --position-embedding-type rope");
  MT_REQUIRE(!(recomputes_modules() && recompute_activations),
             "selective and full recompute exclude each other: choose one "
             "--recompute-granularity");
  MT_REQUIRE(!recompute_mla_up_proj || arch.mla.enabled,
             "--recompute-modules mla_up_proj needs --multi-latent-attention (Megatron's rule)");
  MT_REQUIRE(!recompute_layernorm || layernorm_order == LayerNormOrder::kPreLayerNorm,
             "--recompute-modules layernorm recomputes a pre-LayerNorm layer's norms (Megatron-"
             "Core's layers); a post-LayerNorm layer's norm outputs are its residual stream: "
             "drop layernorm");
  validate_yarn(*this);
  if (arch.mla.enabled) validate_mla(*this);
  if (arch.dsa.enabled) validate_dsa(*this);
  validate_moe_options(arch.moe, num_layers, ffn_size(), tp_size);
  MT_REQUIRE(hidden_dropout >= 0 && hidden_dropout < 1, "--hidden-dropout must be in [0, 1), got ",
             hidden_dropout);
  MT_REQUIRE(attention_dropout >= 0 && attention_dropout < 1,
             "--attention-dropout must be in [0, 1), got ", attention_dropout);
  MT_REQUIRE(arch.mup.base_hidden_size >= 0, "--mup-base-hidden-size must be positive, got ",
             arch.mup.base_hidden_size);
  MT_REQUIRE(!arch.mup.base_head_dim || *arch.mup.base_head_dim > 0,
             "--mup-base-head-dim must be positive, got ", arch.mup.base_head_dim.value_or(0));
  if (arch.position_embedding == PositionEmbedding::kRope ||
      arch.position_embedding == PositionEmbedding::kYarn) {
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
