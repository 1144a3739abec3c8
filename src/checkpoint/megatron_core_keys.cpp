#include "checkpoint/megatron_core_keys.h"

#include <regex>
#include <utility>

#include "checkpoint/megatron_lm_torch.h"

namespace megatron {

namespace {

// Layer-local names megatron-cpp and Megatron-Core spell alike (QK norms, MoE).
bool same_on_both_sides(const std::string& suffix) {
  static const std::regex pattern(
      R"(self_attention\.(q|k)_layernorm\.(weight|bias)|mlp\.router\.(weight|expert_bias)|)"
      R"(mlp\.(experts|shared_experts)\.linear_fc[12]\.(weight|bias)|mlp\.shared_experts\.gate_weight|)"
      R"(self_attention\.linear_(q_proj|q_down_proj|q_up_proj|kv_down_proj|kv_up_proj)\.weight)");
  return std::regex_match(suffix, pattern);
}

// An MLA layer's latent norms: megatron-cpp's names and Transformer Engine's fused ones.
constexpr std::pair<const char*, const char*> kLatentNorms[] = {
    {"self_attention.q_layernorm.weight", "self_attention.linear_q_up_proj.layer_norm_weight"},
    {"self_attention.q_layernorm.bias", "self_attention.linear_q_up_proj.layer_norm_bias"},
    {"self_attention.kv_layernorm.weight", "self_attention.linear_kv_up_proj.layer_norm_weight"},
    {"self_attention.kv_layernorm.bias", "self_attention.linear_kv_up_proj.layer_norm_bias"}};

// Megatron-Core's layer-local name of megatron-cpp's `ours` in a layer that is MoE or not, with
// multi-latent attention or not, or "".
std::string core_suffix(const std::string& ours, bool moe, bool mla) {
  if (mla) {
    for (const auto& [cpp, core] : kLatentNorms)
      if (ours == cpp) return core;
    if (ours.rfind("input_layernorm.", 0) == 0) return ours;  // not fused: a TELinear follows
  }
  if (same_on_both_sides(ours)) return ours;
  if (moe && ours.rfind("post_attention_layernorm.", 0) == 0)
    return "pre_mlp_layernorm." + ours.substr(ours.find('.') + 1);
  return megatron_lm_layer_suffix(ours, MegatronLmNaming::kCore);
}

// megatron-cpp's layer-local name of Megatron-Core's `suffix`, or "".
std::string ours_suffix(const std::string& suffix) {
  for (const auto& [cpp, core] : kLatentNorms)
    if (suffix == core) return cpp;
  if (same_on_both_sides(suffix)) return suffix;
  return megatron_lm_layer_name(suffix, MegatronLmNaming::kCore);
}

// The axis SwiGLU's [2, ffn] starts at in `ours` (a layer-local name) of `full_shape`, or -1.
int merge_axis(const std::string& ours, const Shape& full_shape) {
  const bool fc1 = ours.rfind("mlp.dense_h_to_4h.", 0) == 0 ||
                   ours.rfind("mlp.shared_experts.linear_fc1.", 0) == 0 ||
                   ours.rfind("mlp.experts.linear_fc1.", 0) == 0;
  if (!fc1) return -1;
  const int experts = ours.rfind("mlp.experts.", 0) == 0 ? 1 : 0;
  const size_t plain_rank = (ours.ends_with(".weight") ? 2 : 1) + experts;
  return full_shape.size() == plain_rank + 1 ? experts : -1;
}

const std::regex& mtp_pattern() {
  static const std::regex pattern(R"(mtp\.layers\.(\d+)\.(.+))");
  return pattern;
}

// An MTP depth's own modules (not its transformer layer), named alike.
bool mtp_own_tensor(const std::string& rest) {
  static const std::regex pattern(
      R"((enorm|hnorm|final_layernorm)\.(weight|bias)|eh_proj\.weight)");
  return std::regex_match(rest, pattern);
}

constexpr const char* kTransformerLayer = "transformer_layer.";

}  // namespace

bool megatron_core_per_layer_keys(const MoeOptions& moe) {
  return moe.enabled() && moe.layer_freq != "1";
}

std::optional<MegatronCoreKey> megatron_core_key(const std::string& name, const Shape& full_shape,
                                                 const MegatronCoreKeyContext& context) {
  if (name == "embedding.word_embeddings.weight" ||
      name == "embedding.position_embeddings.weight" || name == "output_layer.weight")
    return MegatronCoreKey{name};
  if (name == "final_layernorm.weight" || name == "final_layernorm.bias")
    return MegatronCoreKey{"decoder." + name};
  static const std::regex layer_pattern(R"(layers\.(\d+)\.(.+))");
  std::smatch m;
  if (std::regex_match(name, m, layer_pattern)) {
    const std::string prefix = "layers." + m[1].str() + ".", ours = m[2].str();
    const std::string suffix =
        core_suffix(ours, context.moe_layers.count(prefix) > 0, context.mla.enabled);
    if (suffix.empty()) return std::nullopt;
    if (context.per_layer_keys)
      return MegatronCoreKey{"decoder." + prefix + suffix, -1, merge_axis(ours, full_shape)};
    return MegatronCoreKey{"decoder.layers." + suffix, std::stoll(m[1].str()),
                           merge_axis(ours, full_shape)};
  }
  if (!std::regex_match(name, m, mtp_pattern())) return std::nullopt;
  const std::string rest = m[2].str();
  if (mtp_own_tensor(rest)) return MegatronCoreKey{name};
  if (rest.rfind(kTransformerLayer, 0) != 0) return std::nullopt;
  const std::string prefix = "mtp.layers." + m[1].str() + "." + kTransformerLayer;
  const std::string ours = rest.substr(std::string(kTransformerLayer).size());
  const std::string suffix =
      core_suffix(ours, context.moe_layers.count(prefix) > 0, context.mla.enabled);
  if (suffix.empty()) return std::nullopt;
  return MegatronCoreKey{prefix + suffix, -1, merge_axis(ours, full_shape)};
}

std::optional<MegatronCppName> megatron_cpp_name(const std::string& key) {
  if (key == "embedding.word_embeddings.weight" || key == "embedding.position_embeddings.weight" ||
      key == "output_layer.weight")
    return MegatronCppName{key};
  if (key == "decoder.final_layernorm.weight" || key == "decoder.final_layernorm.bias")
    return MegatronCppName{key.substr(8)};
  std::smatch m;
  static const std::regex one_layer(R"(decoder\.layers\.(\d+)\.(.+))");
  if (std::regex_match(key, m, one_layer)) {
    const std::string ours = ours_suffix(m[2].str());
    if (ours.empty()) return std::nullopt;
    return MegatronCppName{"layers." + m[1].str() + "." + ours};
  }
  const std::string stacked = "decoder.layers.";
  if (key.rfind(stacked, 0) == 0) {
    const std::string ours = ours_suffix(key.substr(stacked.size()));
    if (ours.empty()) return std::nullopt;
    return MegatronCppName{ours, true};
  }
  if (!std::regex_match(key, m, mtp_pattern())) return std::nullopt;
  const std::string rest = m[2].str();
  if (mtp_own_tensor(rest)) return MegatronCppName{key};
  if (rest.rfind(kTransformerLayer, 0) != 0) return std::nullopt;
  const std::string ours = ours_suffix(rest.substr(std::string(kTransformerLayer).size()));
  if (ours.empty()) return std::nullopt;
  return MegatronCppName{"mtp.layers." + m[1].str() + "." + kTransformerLayer + ours};
}

bool megatron_core_permutes_rows(const std::string& name, const MlaOptions& mla) {
  return mla.enabled && mla.qk_pos_emb_head_dim > 0 &&
         (name.ends_with("self_attention.linear_q_up_proj.weight") ||
          name.ends_with("self_attention.linear_q_proj.weight") ||
          name.ends_with("self_attention.linear_kv_down_proj.weight"));
}

int64_t megatron_core_row(const std::string& name, int64_t row, const MlaOptions& mla) {
  const int64_t dr = mla.qk_pos_emb_head_dim;
  // The rope rows follow `content` rows: per head for the query, once for the key latent.
  const bool query = !name.ends_with("linear_kv_down_proj.weight");
  const int64_t content = query ? mla.qk_head_dim : mla.kv_lora_rank;
  const int64_t block = query ? content + dr : row + 1;
  const int64_t base = query ? row / block * block : 0, in = row - base;
  if (in < content) return row;
  const int64_t j = in - content;
  return base + content + (j < dr / 2 ? 2 * j : 2 * (j - dr / 2) + 1);
}

Tensor megatron_cpp_rows(const std::string& name, const Tensor& t, const MlaOptions& mla) {
  if (!megatron_core_permutes_rows(name, mla)) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  for (int64_t r = 0; r < t.size(0); ++r) {
    const int64_t from = megatron_core_row(name, r, mla);
    out.slice(0, r, r + 1).copy_from(t.slice(0, from, from + 1));
  }
  return out;
}

}  // namespace megatron
