#include "plan/model_spec.h"

#include "core/error.h"

namespace megatron::plan {

NormOrder ModelSpec::norm_order() const {
  if (layernorm_order == LayerNormOrder::kPostLayerNorm) return NormOrder::kPost;
  return apply_residual_connection_post_layernorm ? NormOrder::kPreResidualFromNorm
                                                  : NormOrder::kPre;
}

void ModelSpec::set_norm_order(NormOrder order) {
  layernorm_order =
      order == NormOrder::kPost ? LayerNormOrder::kPostLayerNorm : LayerNormOrder::kPreLayerNorm;
  apply_residual_connection_post_layernorm = order == NormOrder::kPreResidualFromNorm;
}

int64_t ModelSpec::padded_vocab(int tensor_parallel) const {
  const int64_t multiple = int64_t(make_vocab_size_divisible_by) * tensor_parallel;
  return (vocab_size + multiple - 1) / multiple * multiple;
}

void validate_model(const ModelSpec& m) {
  auto positive = [](int64_t v, const char* flag) {
    MT_REQUIRE(v > 0, flag, " must be given and positive, got ", v);
  };
  positive(m.num_layers, "--num-layers");
  positive(m.hidden_size, "--hidden-size");
  positive(m.num_attention_heads, "--num-attention-heads");
  positive(m.seq_length, "--seq-length");
  positive(m.vocab_size, "--vocab-size");
  positive(m.make_vocab_size_divisible_by, "--make-vocab-size-divisible-by");
  MT_REQUIRE(m.ffn_hidden_size >= 0, "--ffn-hidden-size must be positive, got ", m.ffn_hidden_size);
  MT_REQUIRE(m.arch.kv_channels > 0 || m.hidden_size % m.num_attention_heads == 0, "--hidden-size ",
             m.hidden_size, " must be divisible by --num-attention-heads ", m.num_attention_heads,
             " (or give --kv-channels)");
  MT_REQUIRE(m.arch.num_query_groups >= 0 && m.num_attention_heads % m.query_groups() == 0,
             "--num-query-groups ", m.arch.num_query_groups, " must divide --num-attention-heads ",
             m.num_attention_heads);
  MT_REQUIRE(m.positions() >= m.seq_length, "--max-position-embeddings ", m.max_position_embeddings,
             " must be >= --seq-length ", m.seq_length);
  MT_REQUIRE(m.hidden_dropout >= 0 && m.hidden_dropout < 1, "--hidden-dropout must be in [0, 1)");
  MT_REQUIRE(m.attention_dropout >= 0 && m.attention_dropout < 1,
             "--attention-dropout must be in [0, 1)");
  MT_REQUIRE(m.family != ModelFamily::kBert || (m.mask_prob > 0 && m.mask_prob <= 1),
             "--mask-prob must be in (0, 1], got ", m.mask_prob);
  MT_REQUIRE(m.norm_order() != NormOrder::kPost || m.family == ModelFamily::kBert,
             "--post-layernorm is a BERT option: give --model bert (GPT models are "
             "pre-LayerNorm)");
  MT_REQUIRE(!m.arch.moe.enabled() || m.family == ModelFamily::kGpt,
             "--num-experts: mixture of experts is a GPT option: give --model gpt");
  validate_moe_options(m.arch.moe, m.num_layers, m.ffn_size(), 1);
}

const char* family_name(ModelFamily family) {
  return family == ModelFamily::kGpt ? "gpt" : "bert";
}

const char* norm_order_name(NormOrder order) {
  switch (order) {
    case NormOrder::kPre:
      return "pre-LN";
    case NormOrder::kPreResidualFromNorm:
      return "pre-LN, residuals from the norms";
    case NormOrder::kPost:
      return "post-LN";
  }
  return "";
}

ModelFamily family_from_name(const std::string& name) {
  if (name == "gpt") return ModelFamily::kGpt;
  if (name == "bert") return ModelFamily::kBert;
  MT_THROW("--model '", name, "' is not a model family: expected gpt or bert");
}

}  // namespace megatron::plan
