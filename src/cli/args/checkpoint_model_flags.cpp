#include "cli/args/checkpoint_model_flags.h"

#include <cstdio>
#include <cstdlib>
#include <functional>

namespace megatron::cli {

namespace {

// What a model flag means for a built model, in the flag's own terms.
struct ModelFlag {
  const char* flag;
  enum Kind { kSwitch, kInteger, kReal, kName } kind;
  std::function<bool(const LanguageModelConfig&)> on;           // kSwitch
  std::function<double(const LanguageModelConfig&)> number;     // kInteger, kReal
  std::function<std::string(const LanguageModelConfig&)> name;  // kName
};

ModelFlag on(const char* flag, std::function<bool(const LanguageModelConfig&)> f) {
  return {flag, ModelFlag::kSwitch, std::move(f), {}, {}};
}
ModelFlag integer(const char* flag, std::function<double(const LanguageModelConfig&)> f) {
  return {flag, ModelFlag::kInteger, {}, std::move(f), {}};
}
ModelFlag real(const char* flag, std::function<double(const LanguageModelConfig&)> f) {
  return {flag, ModelFlag::kReal, {}, std::move(f), {}};
}
ModelFlag name(const char* flag, std::function<std::string(const LanguageModelConfig&)> f) {
  return {flag, ModelFlag::kName, {}, {}, std::move(f)};
}

using C = LanguageModelConfig;
const std::vector<ModelFlag>& model_flags() {
  static const std::vector<ModelFlag> flags = {
      integer("--num-layers", [](const C& c) { return c.num_layers; }),
      integer("--hidden-size", [](const C& c) { return double(c.hidden_size); }),
      integer("--num-attention-heads", [](const C& c) { return double(c.num_attention_heads); }),
      integer("--ffn-hidden-size", [](const C& c) { return double(c.ffn_size()); }),
      integer("--kv-channels", [](const C& c) { return double(c.head_dim()); }),
      on("--group-query-attention", [](const C& c) { return c.arch.num_query_groups > 0; }),
      integer("--num-query-groups", [](const C& c) { return double(c.query_groups()); }),
      integer("--max-position-embeddings", [](const C& c) { return c.max_position_embeddings; }),
      name("--position-embedding-type",
           [](const C& c) { return position_embedding_name(c.arch.position_embedding); }),
      real("--rotary-base", [](const C& c) { return c.arch.rotary_base; }),
      real("--rotary-percent", [](const C& c) { return c.arch.rotary_percent; }),
      real("--rotary-seq-len-interpolation-factor",
           [](const C& c) { return c.arch.rotary_seq_len_interpolation_factor; }),
      on("--rotary-interleaved", [](const C& c) { return c.arch.rotary_interleaved; }),
      on("--use-rope-scaling", [](const C& c) { return c.arch.rope_scaling.enabled(); }),
      real("--rope-scaling-factor", [](const C& c) { return c.arch.rope_scaling.factor; }),
      real("--rotary-scaling-factor", [](const C& c) { return c.arch.yarn.factor; }),
      real("--mscale", [](const C& c) { return c.arch.yarn.mscale; }),
      real("--mscale-all-dim", [](const C& c) { return c.arch.yarn.mscale_all_dim; }),
      integer("--yarn-original-max-position-embeddings",
              [](const C& c) { return c.arch.yarn.original_max_position_embeddings; }),
      real("--yarn-beta-fast", [](const C& c) { return c.arch.yarn.beta_fast; }),
      real("--yarn-beta-slow", [](const C& c) { return c.arch.yarn.beta_slow; }),
      on("--yarn-correction-range-round-to-int",
         [](const C& c) { return c.arch.yarn.round_to_int; }),
      on("--no-yarn-correction-range-round-to-int",
         [](const C& c) { return !c.arch.yarn.round_to_int; }),
      name("--normalization", [](const C& c) { return normalization_name(c.arch.normalization); }),
      real("--norm-epsilon", [](const C& c) { return c.layernorm_epsilon; }),
      real("--layernorm-epsilon", [](const C& c) { return c.layernorm_epsilon; }),
      on("--apply-layernorm-1p", [](const C& c) { return c.arch.apply_layernorm_1p; }),
      on("--swiglu", [](const C& c) { return c.arch.swiglu; }),
      on("--squared-relu", [](const C& c) { return c.arch.squared_relu; }),
      on("--openai-gelu", [](const C& c) { return c.gelu == kernels::GeluForm::kTanh; }),
      on("--disable-bias-linear", [](const C& c) { return !c.arch.add_bias_linear; }),
      on("--add-qkv-bias", [](const C& c) { return c.arch.add_qkv_bias; }),
      on("--qk-layernorm", [](const C& c) { return c.arch.qk_layernorm; }),
      on("--untie-embeddings-and-output-weights",
         [](const C& c) { return c.arch.untie_embeddings_and_output_weights; }),
      integer("--num-experts", [](const C& c) { return double(c.arch.moe.num_experts); }),
      integer("--moe-ffn-hidden-size", [](const C& c) { return double(c.expert_ffn_size()); }),
      integer("--moe-router-topk", [](const C& c) { return double(c.arch.moe.topk); }),
      integer("--moe-shared-expert-intermediate-size",
              [](const C& c) { return double(c.arch.moe.shared_expert_ffn); }),
      on("--moe-shared-expert-gate", [](const C& c) { return c.arch.moe.shared_expert_gate; }),
      name("--moe-router-score-function",
           [](const C& c) { return moe_score_function_name(c.arch.moe.score_function); }),
      on("--moe-router-pre-softmax", [](const C& c) { return c.arch.moe.pre_softmax; }),
      on("--moe-router-enable-expert-bias", [](const C& c) { return c.arch.moe.expert_bias; }),
      integer("--moe-router-num-groups", [](const C& c) { return double(c.arch.moe.num_groups); }),
      integer("--moe-router-group-topk", [](const C& c) { return double(c.arch.moe.group_topk); }),
      real("--moe-router-topk-scaling-factor",
           [](const C& c) { return c.arch.moe.topk_scaling_factor.value_or(1.0); }),
      name("--moe-layer-freq", [](const C& c) { return c.arch.moe.layer_freq; }),
      real("--moe-expert-capacity-factor",
           [](const C& c) { return c.arch.moe.capacity_factor.value_or(0.0); }),
      on("--moe-pad-expert-input-to-capacity",
         [](const C& c) { return c.arch.moe.pad_to_capacity; }),
      name("--moe-token-drop-policy",
           [](const C& c) { return moe_token_drop_policy_name(c.arch.moe.drop_policy); }),
      integer("--mtp-num-layers", [](const C& c) { return double(c.arch.mtp.num_layers); }),
      on("--apply-residual-connection-post-layernorm",
         [](const C& c) { return c.apply_residual_connection_post_layernorm; }),
  };
  return flags;
}

const ModelFlag* find_model_flag(std::string_view flag) {
  for (const ModelFlag& f : model_flags())
    if (flag == f.flag) return &f;
  return nullptr;
}

// The checkpoint's value in the flag's terms, and whether `given` says the same. Reals compare
// at float precision (the model stores floats: "1e-5" equals 1e-5f).
bool agrees(const ModelFlag& f, const std::vector<std::string>& given, const C& config,
            std::string& stored) {
  switch (f.kind) {
    case ModelFlag::kSwitch:
      stored = f.on(config) ? "on" : "off";
      return f.on(config);
    case ModelFlag::kName:
      stored = f.name(config);
      return given.size() == 1 && given[0] == stored;
    case ModelFlag::kInteger:
    case ModelFlag::kReal: {
      const double value = f.number(config);
      char buffer[32];  // reals at the float precision the model stores
      std::snprintf(buffer, sizeof buffer, f.kind == ModelFlag::kReal ? "%.7g" : "%.0f", value);
      stored = buffer;
      if (given.size() != 1) return false;
      char* end = nullptr;
      const double g = std::strtod(given[0].c_str(), &end);
      if (given[0].empty() || *end != '\0') return false;
      return f.kind == ModelFlag::kInteger ? g == value : float(g) == float(value);
    }
  }
  return false;
}

}  // namespace

bool is_model_flag(std::string_view flag) {
  return find_model_flag(flag) != nullptr;
}

std::vector<std::string> model_flag_mismatches(const std::vector<GivenModelFlag>& given,
                                               const LanguageModelConfig& config) {
  std::vector<std::string> out;
  for (const GivenModelFlag& g : given) {
    const ModelFlag* f = find_model_flag(g.flag);
    if (f == nullptr) continue;
    std::string stored;
    if (agrees(*f, g.values, config, stored)) continue;
    std::string text = g.flag;
    for (const std::string& v : g.values) text.append(" ").append(v);
    text.append(" differs from the checkpoint's ");
    if (f->kind == ModelFlag::kSwitch)
      text.append("(").append(f->flag).append(" ").append(stored).append(")");
    else
      text.append(stored);
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace megatron::cli
