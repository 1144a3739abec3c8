#include "convert/hf_moe.h"

#include "core/error.h"

namespace megatron {
namespace {

const char kMixtral[] = "MixtralForCausalLM";
const char kQwen2Moe[] = "Qwen2MoeForCausalLM";
const char kQwen3Moe[] = "Qwen3MoeForCausalLM";

int64_t required_int(const nlohmann::json& j, const std::string& arch, const char* key) {
  MT_REQUIRE(j.contains(key) && j[key].is_number_integer(), "HF ", arch, " config.json has no ",
             "integer '", key, "'");
  return j[key].get<int64_t>();
}

// Megatron's --moe-layer-freq for one flag per layer: "1" when every layer is MoE, else the list.
std::string layer_freq_of(const std::vector<bool>& moe) {
  bool all = true;
  std::string list = "[";
  for (size_t i = 0; i < moe.size(); ++i) {
    all = all && moe[i];
    if (i > 0) list.push_back(',');
    list.push_back(moe[i] ? '1' : '0');
  }
  list.push_back(']');
  return all ? std::string("1") : list;
}

}  // namespace

bool is_hf_moe_architecture(const std::string& a) {
  return a == kMixtral || a == kQwen2Moe || a == kQwen3Moe;
}

void set_moe_options_from_hf(const nlohmann::json& j, const std::string& arch, GptConfig& c) {
  MoeOptions& m = c.arch.moe;
  const bool mixtral = arch == kMixtral;
  m.num_experts = required_int(j, arch, mixtral ? "num_local_experts" : "num_experts");
  MT_REQUIRE(m.num_experts > 0, "HF ", arch,
             " config.json: ", mixtral ? "num_local_experts" : "num_experts", " = ", m.num_experts,
             " has no experts; a dense model converts as ",
             mixtral             ? "MistralForCausalLM"
             : arch == kQwen2Moe ? "Qwen2ForCausalLM"
                                 : "Qwen3ForCausalLM");
  m.topk = required_int(j, arch, "num_experts_per_tok");
  // Mixtral renormalises the top k always (Megatron's post-softmax router); Qwen when
  // norm_topk_prob, else the top k of the softmax over all experts (pre-softmax).
  m.pre_softmax = !mixtral && !j.value("norm_topk_prob", false);
  m.score_function = MoeScoreFunction::kSoftmax;
  set_moe_load_balancing(m, {"none"}, {0.0});
  std::vector<bool> sparse(size_t(c.num_layers), true);
  if (mixtral) {
    const double jitter = j.contains("router_jitter_noise") && j["router_jitter_noise"].is_number()
                              ? j["router_jitter_noise"].get<double>()
                              : 0.0;
    MT_REQUIRE(jitter == 0.0, "HF ", arch, " config.json: router_jitter_noise = ", jitter,
               " is not supported (HF multiplies the hidden states by uniform noise in training; "
               "megatron-cpp has no such jitter): set it to 0");
    m.ffn_hidden_size = c.ffn_hidden_size;  // intermediate_size is the experts' width
  } else {
    m.ffn_hidden_size = required_int(j, arch, "moe_intermediate_size");
    const int64_t step =
        j.contains("decoder_sparse_step") ? required_int(j, arch, "decoder_sparse_step") : 1;
    MT_REQUIRE(step >= 1, "HF ", arch, " config.json: decoder_sparse_step = ", step,
               " must be >= 1");
    for (int i = 0; i < c.num_layers; ++i) sparse[size_t(i)] = (i + 1) % step == 0;
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      MT_REQUIRE(j["mlp_only_layers"].is_array(), "HF ", arch,
                 " config.json: mlp_only_layers must be a list of layer numbers");
      for (const auto& layer : j["mlp_only_layers"]) {
        MT_REQUIRE(layer.is_number_integer() && layer.get<int64_t>() >= 0 &&
                       layer.get<int64_t>() < c.num_layers,
                   "HF ", arch, " config.json: mlp_only_layers entry ", layer.dump(),
                   " is not a layer number below num_hidden_layers = ", c.num_layers);
        sparse[size_t(layer.get<int64_t>())] = false;
      }
    }
    if (arch == kQwen2Moe) {
      m.shared_expert_ffn = required_int(j, arch, "shared_expert_intermediate_size");
      MT_REQUIRE(m.shared_expert_ffn > 0, "HF ", arch,
                 " config.json: shared_expert_intermediate_size must be > 0 (Qwen2-MoE's every "
                 "sparse layer has a shared expert)");
      m.shared_expert_gate = true;  // HF's shared_expert_gate: sigmoid(x·w) per token
    }
  }
  bool any = false;
  for (bool s : sparse) any = any || s;
  MT_REQUIRE(any, "HF ", arch,
             " config.json: decoder_sparse_step and mlp_only_layers leave no sparse layer; a "
             "dense model converts as a Qwen2ForCausalLM or Qwen3ForCausalLM");
  m.layer_freq = layer_freq_of(sparse);
  validate_moe_options(m, c.num_layers, c.ffn_hidden_size, 1);
}

std::string hf_moe_architecture_of(const GptConfig& c) {
  return c.arch.moe.shared_expert_ffn > 0 ? kQwen2Moe : c.arch.qk_layernorm ? kQwen3Moe : kMixtral;
}

void add_hf_moe_config(const GptConfig& c, const std::string& arch, nlohmann::json& j) {
  const MoeOptions& m = c.arch.moe;
  MT_REQUIRE(m.enabled(), arch, " is a mixture of experts: this model has none (--num-experts)");
  MT_REQUIRE(hf_moe_architecture_of(c) == arch, "this model does not export to ", arch, ": ",
             m.shared_expert_ffn > 0
                 ? "its shared expert (--moe-shared-expert-intermediate-size) is Qwen2-MoE's "
                   "(Qwen2MoeForCausalLM)"
             : c.arch.qk_layernorm ? "its QK norms are Qwen3-MoE's (Qwen3MoeForCausalLM)"
                                   : "without a shared expert or QK norms it is a "
                                     "MixtralForCausalLM");
  // HF's routers: softmax scores, top k, optional renormalisation; nothing else.
  MT_REQUIRE(!m.sinkhorn && m.score_function == MoeScoreFunction::kSoftmax, arch,
             " routes by the softmax of the router logits: a model trained with ",
             m.sinkhorn ? "--moe-router-load-balancing-type sinkhorn"
                        : "--moe-router-score-function sigmoid",
             " does not export to it");
  MT_REQUIRE(m.num_groups == 0, arch,
             " has no group-limited routing: a model with --moe-router-num-groups does not "
             "export to it");
  MT_REQUIRE(!m.topk_scaling_factor || *m.topk_scaling_factor == 1.0, arch,
             " does not scale the routing weights: a model with "
             "--moe-router-topk-scaling-factor ",
             m.topk_scaling_factor.value_or(1.0), " does not export to it");
  MT_REQUIRE(!m.capacity_factor, arch,
             " is dropless: a model with --moe-expert-capacity-factor does not export to it");
  MT_REQUIRE(m.shared_expert_ffn == 0 || m.shared_expert_gate, arch,
             " gates its shared expert (shared_expert_gate): a model without "
             "--moe-shared-expert-gate does not export to it");
  const TransformerConfig t = c.transformer_config();
  const std::vector<bool> sparse = moe_layer_pattern(m.layer_freq, c.num_layers);
  j["num_experts_per_tok"] = m.topk;
  if (arch == kMixtral) {
    MT_REQUIRE(!m.pre_softmax, arch,
               " renormalises the top-k routing weights: a model with --moe-router-pre-softmax "
               "exports as Qwen3MoeForCausalLM (norm_topk_prob false) with --qk-layernorm, or "
               "keep it in megatron-cpp's format");
    for (int i = 0; i < c.num_layers; ++i)
      MT_REQUIRE(sparse[size_t(i)], arch, " has experts in every layer: layer ", i,
                 " is dense (--moe-layer-freq ", m.layer_freq, ")");
    j["intermediate_size"] = t.expert_ffn_size();
    j["num_local_experts"] = m.num_experts;
    return;
  }
  j["num_experts"] = m.num_experts;
  j["moe_intermediate_size"] = t.expert_ffn_size();
  if (arch == kQwen2Moe) j["shared_expert_intermediate_size"] = m.shared_expert_ffn;
  j["norm_topk_prob"] = !m.pre_softmax;
  j["decoder_sparse_step"] = 1;
  nlohmann::json dense = nlohmann::json::array();
  for (int i = 0; i < c.num_layers; ++i)
    if (!sparse[size_t(i)]) dense.push_back(i);
  j["mlp_only_layers"] = dense;
}

HfSparseBlockNames hf_sparse_block_names(const GptConfig& c, int layer) {
  const bool mixtral = hf_moe_architecture_of(c) == kMixtral;
  const std::string block =
      "layers." + std::to_string(layer) + (mixtral ? ".block_sparse_moe." : ".mlp.");
  HfSparseBlockNames n;
  n.router = block + "gate.weight";
  for (int64_t e = 0; e < c.arch.moe.num_experts; ++e) {
    const std::string ex = block + "experts." + std::to_string(e) + ".";
    n.experts.push_back(
        mixtral ? std::array<std::string, 3>{ex + "w1.weight", ex + "w3.weight", ex + "w2.weight"}
                : std::array<std::string, 3>{ex + "gate_proj.weight", ex + "up_proj.weight",
                                             ex + "down_proj.weight"});
  }
  if (c.arch.moe.shared_expert_ffn > 0) {
    const std::string s = block + "shared_expert.";
    n.shared = {s + "gate_proj.weight", s + "up_proj.weight", s + "down_proj.weight"};
    n.shared_gate = block + "shared_expert_gate.weight";
  }
  return n;
}

}  // namespace megatron
