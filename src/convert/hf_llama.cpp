#include "convert/hf_llama.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

#include "convert/hf_directory.h"
#include "convert/hf_moe.h"
#include "convert/hf_tensor.h"
#include "core/decimal.h"

namespace megatron {
namespace {

const char* const kArchitectures[] = {
    "LlamaForCausalLM",   "MistralForCausalLM",  "Qwen2ForCausalLM",   "Qwen3ForCausalLM",
    "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"};
const char* const kModelTypes[] = {"llama",   "mistral",   "qwen2",    "qwen3",
                                   "mixtral", "qwen2_moe", "qwen3_moe"};

// Qwen2's q/k/v biases and Qwen3's per-head QK norms, in their dense and MoE forms.
bool has_qkv_bias(const std::string& arch) {
  return arch == "Qwen2ForCausalLM" || arch == "Qwen2MoeForCausalLM";
}
bool has_qk_norm(const std::string& arch) {
  return arch == "Qwen3ForCausalLM" || arch == "Qwen3MoeForCausalLM";
}

// A float field that may be absent or null.
float optional_float(const nlohmann::json& j, const char* key, float fallback) {
  return j.contains(key) && j[key].is_number() ? j[key].get<float>() : fallback;
}

struct Shapes {
  int64_t h, heads, groups, queries, d, f, vocab, padded_vocab;
};

Shapes shapes(const GptConfig& c) {
  const TransformerConfig t = c.transformer_config();
  const int64_t g = t.query_groups();
  return {c.hidden_size,
          c.num_attention_heads,
          g,
          c.num_attention_heads / g,
          t.head_dim(),
          t.ffn_size(),
          c.vocab_size,
          c.padded_vocab_size};
}

std::string layer(int i) {
  return "layers." + std::to_string(i) + ".";
}

// Collects HF tensors by name with their expected shapes, reporting every problem at once.
class HfSource {
 public:
  explicit HfSource(const TensorMap& hf) {
    for (const auto& [raw, t] : hf) tensors_[raw.rfind("model.", 0) == 0 ? raw.substr(6) : raw] = t;
  }
  // The f32 tensor `name` of `shape`, or an undefined tensor (the problem noted).
  Tensor take(const std::string& name, const Shape& shape) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) {
      note() << name << ": missing (expected shape " << shape_str(shape) << ")";
      return Tensor();
    }
    Tensor t = it->second;
    tensors_.erase(it);
    if (t.shape() != shape) {
      note() << name << ": shape " << shape_str(t.shape()) << ", expected " << shape_str(shape);
      return Tensor();
    }
    return hf_tensor_to_f32(t, "Llama");
  }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  // Older `transformers` saved each layer's RoPE frequencies (self_attn.rotary_emb.inv_freq,
  // 1 / base^(2i / rotary_dim)) as a buffer. Nothing is imported from them: they are removed
  // and checked against the config's rope_theta, to the precision of their dtype.
  void check_rotary_inv_freq(const std::string& name, const TransformerConfig& c) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return;
    const DType stored = it->second.dtype();
    const int64_t half = c.rotary_dim() / 2;
    const Tensor t = take(name, {half});
    if (!t.defined()) return;
    const double tolerance = stored == DType::F32 || stored == DType::F64 ? 1e-6
                             : stored == DType::F16                       ? 1e-3
                                                                          : 8e-3;
    const float* f = t.data<float>();
    for (int64_t i = 0; i < half; ++i) {
      const double want =
          1.0 / std::pow(double(c.arch.rotary_base), 2.0 * double(i) / double(c.rotary_dim()));
      if (std::abs(f[i] - want) > tolerance * want) {
        note() << name << ": RoPE frequency " << i << " is " << f[i] << ", rope_theta "
               << c.arch.rotary_base << " gives " << want;
        return;
      }
    }
  }
  void finish() {
    for (const auto& [name, t] : tensors_)
      note() << name << ": unexpected tensor " << shape_str(t.shape());
    MT_REQUIRE(count_ == 0, "HF Llama weights do not match config.json (", count_, " problem",
               count_ == 1 ? "" : "s", "):", problems_.str());
  }

 private:
  std::ostringstream& note() {
    ++count_;
    problems_ << "\n  ";
    return problems_;
  }
  TensorMap tensors_;
  std::ostringstream problems_;
  int count_ = 0;
};

Tensor pad_rows(const Tensor& t, int64_t rows) {
  Tensor padded = Tensor::zeros({rows, t.size(1)}, DType::F32);
  padded.slice(0, 0, t.size(0)).copy_from(t);
  return padded;
}

// q [g·q·d, ...], k, v [g·d, ...] -> [g·(q+2)·d, ...]: per group its queries, key, value.
Tensor group_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const Shapes& s) {
  Shape rest(q.shape().begin() + 1, q.shape().end());
  auto grouped = [&](const Tensor& t, int64_t heads) {
    Shape g = {s.groups, heads, s.d};
    g.insert(g.end(), rest.begin(), rest.end());
    return t.view(g);
  };
  Shape out_shape = {s.groups, s.queries + 2, s.d};
  out_shape.insert(out_shape.end(), rest.begin(), rest.end());
  Tensor out = Tensor::zeros(out_shape, DType::F32);
  out.slice(1, 0, s.queries).copy_from(grouped(q, s.queries));
  out.slice(1, s.queries, s.queries + 1).copy_from(grouped(k, 1));
  out.slice(1, s.queries + 1, s.queries + 2).copy_from(grouped(v, 1));
  Shape flat = {s.groups * (s.queries + 2) * s.d};
  flat.insert(flat.end(), rest.begin(), rest.end());
  return out.view(flat);
}

// The inverse: slot range [first, first + heads) of every group, as [g·heads·d, ...].
Tensor ungroup_qkv(const Tensor& qkv, int64_t first, int64_t heads, const Shapes& s) {
  Shape rest(qkv.shape().begin() + 1, qkv.shape().end());
  Shape grouped = {s.groups, s.queries + 2, s.d};
  grouped.insert(grouped.end(), rest.begin(), rest.end());
  Shape flat = {s.groups * heads * s.d};
  flat.insert(flat.end(), rest.begin(), rest.end());
  return qkv.view(grouped).slice(1, first, first + heads).clone().view(flat);
}

// The gated MLP's gate and up projections [f, h] as our stacked fc1 [2, f, h] (undefined when
// either is missing or misshaped: noted by `hf`).
Tensor take_gated_fc1(HfSource& hf, const std::string& gate_name, const std::string& up_name,
                      int64_t f, int64_t h) {
  const Tensor gate = hf.take(gate_name, {f, h}), up = hf.take(up_name, {f, h});
  if (!gate.defined() || !up.defined()) return Tensor();
  Tensor fc1 = Tensor::zeros({2, f, h}, DType::F32);
  fc1.select(0, 0).copy_from(gate);
  fc1.select(0, 1).copy_from(up);
  return fc1;
}

// MoE layer i's sparse block (convert/hf_moe.h): the router, every expert's gate/up/down stacked
// into experts.linear_fc1 [E, 2, F, h] and linear_fc2 [E, h, F], the gated shared expert.
void take_sparse_block(HfSource& hf, const GptConfig& c, int i, TensorMap& ours) {
  const HfSparseBlockNames n = hf_sparse_block_names(c, i);
  const int64_t e = c.arch.moe.num_experts, f = c.transformer_config().expert_ffn_size(),
                h = c.hidden_size;
  const std::string us = layer(i) + "mlp.";
  const Tensor router = hf.take(n.router, {e, h});
  if (router.defined()) ours[us + "router.weight"] = router;
  Tensor fc1 = Tensor::zeros({e, 2, f, h}, DType::F32), fc2 = Tensor::zeros({e, h, f}, DType::F32);
  bool complete = true;
  for (int64_t x = 0; x < e; ++x) {
    const auto& [gate, up, down] = n.experts[size_t(x)];
    const Tensor gate_up = take_gated_fc1(hf, gate, up, f, h), w2 = hf.take(down, {h, f});
    complete = complete && gate_up.defined() && w2.defined();
    if (!complete) continue;
    fc1.select(0, x).copy_from(gate_up);
    fc2.select(0, x).copy_from(w2);
  }
  if (complete) {
    ours[us + "experts.linear_fc1.weight"] = fc1;
    ours[us + "experts.linear_fc2.weight"] = fc2;
  }
  if (n.shared_gate.empty()) return;
  const int64_t sf = c.arch.moe.shared_expert_ffn;
  const std::pair<std::string, Tensor> shared[] = {
      {"linear_fc1.weight", take_gated_fc1(hf, n.shared[0], n.shared[1], sf, h)},
      {"linear_fc2.weight", hf.take(n.shared[2], {h, sf})},
      {"gate_weight", hf.take(n.shared_gate, {1, h})}};
  for (const auto& [name, t] : shared)
    if (t.defined()) ours[us + "shared_experts." + name] = t;
}

const Tensor& our_tensor(const TensorMap& ours, const std::string& name) {
  auto it = ours.find(name);
  MT_REQUIRE(it != ours.end(), "no tensor '", name, "' to export to HF");
  return it->second;
}

// The inverse of take_sparse_block, names with "model.".
void put_sparse_block(const TensorMap& ours, const GptConfig& c, int i, TensorMap& hf) {
  const HfSparseBlockNames n = hf_sparse_block_names(c, i);
  const int64_t e = c.arch.moe.num_experts;
  const std::string us = layer(i) + "mlp.";
  hf["model." + n.router] = our_tensor(ours, us + "router.weight").clone();
  const Tensor& fc1 = our_tensor(ours, us + "experts.linear_fc1.weight");  // [E, 2, F, h]
  const Tensor& fc2 = our_tensor(ours, us + "experts.linear_fc2.weight");  // [E, h, F]
  for (int64_t x = 0; x < e; ++x) {
    const auto& [gate, up, down] = n.experts[size_t(x)];
    hf["model." + gate] = fc1.select(0, x).select(0, 0).clone();
    hf["model." + up] = fc1.select(0, x).select(0, 1).clone();
    hf["model." + down] = fc2.select(0, x).clone();
  }
  if (n.shared_gate.empty()) return;
  const int64_t sf = c.arch.moe.shared_expert_ffn;
  const Tensor shared_fc1 =
      our_tensor(ours, us + "shared_experts.linear_fc1.weight").view({2, sf, c.hidden_size});
  hf["model." + n.shared[0]] = shared_fc1.select(0, 0).clone();
  hf["model." + n.shared[1]] = shared_fc1.select(0, 1).clone();
  hf["model." + n.shared[2]] = our_tensor(ours, us + "shared_experts.linear_fc2.weight").clone();
  hf["model." + n.shared_gate] = our_tensor(ours, us + "shared_experts.gate_weight").clone();
}

}  // namespace

std::string hf_llama_architecture(const nlohmann::json& j) {
  if (!j.is_object()) return "";
  if (j.contains("architectures") && j["architectures"].is_array())
    for (const auto& a : j["architectures"])
      for (const char* known : kArchitectures)
        if (a.is_string() && a.get<std::string>() == known) return known;
  const std::string type = j.value("model_type", std::string());
  for (size_t i = 0; i < std::size(kModelTypes); ++i)
    if (type == kModelTypes[i]) return kArchitectures[i];
  return "";
}

GptConfig gpt_config_from_hf_llama(const nlohmann::json& j, int64_t padded_vocab_size) {
  const std::string arch = hf_llama_architecture(j);
  MT_REQUIRE(!arch.empty(),
             "HF config.json is not a LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
             "Qwen3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM");
  const std::string act = j.value("hidden_act", std::string("silu"));
  MT_REQUIRE(act == "silu", "HF Llama config.json: hidden_act '", act,
             "' is not supported (the gated MLP computes SiLU: silu)");
  MT_REQUIRE(!j.value("attention_bias", false),
             "HF Llama config.json: attention_bias = true is not supported (q/k/v/o biases); "
             "only Qwen2's q/k/v biases are");
  MT_REQUIRE(!j.value("mlp_bias", false), "HF Llama config.json: mlp_bias = true is not supported");
  GptConfig c;
  c.num_layers = required_config_field<int>(j, "num_hidden_layers", "HF Llama");
  c.hidden_size = required_config_field<int>(j, "hidden_size", "HF Llama");
  c.num_attention_heads = required_config_field<int>(j, "num_attention_heads", "HF Llama");
  c.ffn_hidden_size = required_config_field<int>(j, "intermediate_size", "HF Llama");
  c.vocab_size = required_config_field<int64_t>(j, "vocab_size", "HF Llama");
  c.padded_vocab_size = padded_vocab_size;
  c.max_position_embeddings = required_config_field<int>(j, "max_position_embeddings", "HF Llama");
  if (j.contains("sliding_window") && j["sliding_window"].is_number_integer() &&
      j.value("use_sliding_window", arch == "MistralForCausalLM" || arch == "MixtralForCausalLM"))
    c.max_position_embeddings = std::min(c.max_position_embeddings, j["sliding_window"].get<int>());
  c.seq_length = c.max_position_embeddings;
  c.layernorm_epsilon = optional_float(j, "rms_norm_eps", 1e-6f);
  c.hidden_dropout = 0.0f;
  c.attention_dropout = optional_float(j, "attention_dropout", 0.0f);
  c.init_method_std = optional_float(j, "initializer_range", 0.02f);
  ArchitectureOptions& a = c.arch;
  a.normalization = Normalization::kRMSNorm;
  a.position_embedding = PositionEmbedding::kRope;
  a.rotary_base = optional_float(j, "rope_theta", 10000.0f);
  a.rotary_percent = optional_float(j, "partial_rotary_factor", 1.0f);
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const nlohmann::json& rs = j["rope_scaling"];
    const std::string type = rs.value("rope_type", rs.value("type", std::string()));
    MT_REQUIRE(type == "linear" || type == "llama3", "HF Llama config.json: rope_scaling type '",
               type, "' is not supported (only linear position interpolation and llama3)");
    if (type == "linear") {
      a.rotary_seq_len_interpolation_factor =
          required_config_field<float>(rs, "factor", "HF Llama");
    } else {
      a.rope_scaling.factor = required_config_field<float>(rs, "factor", "HF Llama");
      a.rope_scaling.low_freq_factor =
          required_config_field<float>(rs, "low_freq_factor", "HF Llama");
      a.rope_scaling.high_freq_factor =
          required_config_field<float>(rs, "high_freq_factor", "HF Llama");
      a.rope_scaling.original_max_position_embeddings =
          required_config_field<float>(rs, "original_max_position_embeddings", "HF Llama");
    }
  }
  a.swiglu = true;
  const int kv = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                     ? required_config_field<int>(j, "num_key_value_heads", "HF Llama")
                     : c.num_attention_heads;
  a.num_query_groups = kv == c.num_attention_heads ? 0 : kv;
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    const int d = required_config_field<int>(j, "head_dim", "HF Llama");
    if (d * c.num_attention_heads != c.hidden_size) a.kv_channels = d;
  }
  a.add_bias_linear = false;
  // Newer Qwen2-MoE configs may switch the biases off (qkv_bias, default true).
  a.add_qkv_bias = has_qkv_bias(arch) && j.value("qkv_bias", true);
  a.qk_layernorm = has_qk_norm(arch);  // q_norm and k_norm: RMSNorm per head
  a.untie_embeddings_and_output_weights = !j.value("tie_word_embeddings", false);
  MT_REQUIRE(c.padded_vocab_size >= c.vocab_size, "padded vocabulary size ", c.padded_vocab_size,
             " is smaller than the HF vocab_size ", c.vocab_size);
  if (is_hf_moe_architecture(arch)) set_moe_options_from_hf(j, arch, c);
  return c;
}

nlohmann::json hf_llama_config_from_gpt(const GptConfig& c, const std::string& architecture) {
  MT_REQUIRE(c.arch.normalization == Normalization::kRMSNorm &&
                 c.arch.position_embedding == PositionEmbedding::kRope && c.arch.swiglu &&
                 !c.arch.add_bias_linear,
             "only Llama-style models (RMSNorm, RoPE, SwiGLU, --disable-bias-linear) export to ",
             architecture);
  MT_REQUIRE(!c.arch.apply_layernorm_1p && !c.arch.rotary_interleaved, architecture, " has no ",
             c.arch.apply_layernorm_1p ? "zero-centred norm gains (--apply-layernorm-1p)"
                                       : "interleaved RoPE (--rotary-interleaved)",
             ": this model does not export to it");
  MT_REQUIRE(c.arch.moe.enabled() || !is_hf_moe_architecture(architecture), architecture,
             " is a mixture of experts: a dense model exports as LlamaForCausalLM, "
             "Qwen2ForCausalLM or Qwen3ForCausalLM");
  MT_REQUIRE(!c.arch.moe.enabled() || is_hf_moe_architecture(architecture),
             "a mixture-of-experts model does not export to ", architecture,
             ": it exports as MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM");
  MT_REQUIRE(!c.arch.mup.enabled, architecture,
             "'s config.json has no muP attention scale or multipliers: a --use-mup model does "
             "not export to it");
  const bool moe = c.arch.moe.enabled();
  MT_REQUIRE(c.arch.qk_layernorm == has_qk_norm(architecture), architecture,
             c.arch.qk_layernorm ? " has no QK norm (export to " : " needs a QK norm (",
             c.arch.qk_layernorm ? (moe ? "Qwen3MoeForCausalLM)" : "Qwen3ForCausalLM)")
                                 : "--qk-layernorm)");
  const bool optional_qkv_bias = architecture == "Qwen2MoeForCausalLM";  // its qkv_bias key
  MT_REQUIRE(c.arch.add_qkv_bias == has_qkv_bias(architecture) ||
                 (optional_qkv_bias && !c.arch.add_qkv_bias),
             architecture, c.arch.add_qkv_bias ? " has no" : " needs", " q/k/v biases (",
             c.arch.add_qkv_bias
                 ? (moe ? "export to Qwen2MoeForCausalLM" : "export to Qwen2ForCausalLM")
                 : "--add-qkv-bias",
             ")");
  const Shapes s = shapes(c);
  nlohmann::json j;
  j["architectures"] = {architecture};
  for (size_t i = 0; i < std::size(kArchitectures); ++i)
    if (architecture == kArchitectures[i]) j["model_type"] = kModelTypes[i];
  MT_REQUIRE(j.contains("model_type"), "'", architecture,
             "' is not an HF Llama-family architecture");
  j["hidden_act"] = "silu";
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = s.f;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = s.groups;
  if (s.d * s.heads != s.h) j["head_dim"] = s.d;
  j["rms_norm_eps"] = as_written(c.layernorm_epsilon);
  j["rope_theta"] = as_written(c.arch.rotary_base);
  if (c.arch.rotary_percent != 1.0f) j["partial_rotary_factor"] = as_written(c.arch.rotary_percent);
  const kernels::Llama3RopeScaling& l3 = c.arch.rope_scaling;
  MT_REQUIRE(!(l3.enabled() && c.arch.rotary_seq_len_interpolation_factor != 1.0f),
             "HF's rope_scaling holds one kind of scaling: --use-rope-scaling and "
             "--rotary-seq-len-interpolation-factor together cannot be exported");
  j["rope_scaling"] =
      l3.enabled() ? nlohmann::json{{"rope_type", "llama3"},
                                    {"factor", as_written(l3.factor)},
                                    {"low_freq_factor", as_written(l3.low_freq_factor)},
                                    {"high_freq_factor", as_written(l3.high_freq_factor)},
                                    {"original_max_position_embeddings",
                                     int64_t(l3.original_max_position_embeddings)}}
      : c.arch.rotary_seq_len_interpolation_factor == 1.0f
          ? nlohmann::json(nullptr)
          : nlohmann::json{{"type", "linear"},
                           {"factor", as_written(c.arch.rotary_seq_len_interpolation_factor)}};
  j["attention_dropout"] = as_written(c.attention_dropout);
  j["initializer_range"] = as_written(c.init_method_std);
  j["tie_word_embeddings"] = !c.arch.untie_embeddings_and_output_weights;
  if (optional_qkv_bias && !c.arch.add_qkv_bias) j["qkv_bias"] = false;
  if (moe) add_hf_moe_config(c, architecture, j);
  return j;
}

TensorMap gpt_tensors_from_hf_llama(const TensorMap& hf_in, const GptConfig& c) {
  const Shapes s = shapes(c);
  HfSource hf(hf_in);
  TensorMap ours;
  auto put = [&](const std::string& name, const Tensor& t) {
    if (t.defined()) ours[name] = t;
  };
  put("embedding.word_embeddings.weight", [&] {
    Tensor t = hf.take("embed_tokens.weight", {s.vocab, s.h});
    return t.defined() ? pad_rows(t, s.padded_vocab) : t;
  }());
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string hl = layer(i), us = layer(i);
    put(us + "input_layernorm.weight", hf.take(hl + "input_layernorm.weight", {s.h}));
    const std::string a = hl + "self_attn.";
    hf.check_rotary_inv_freq(a + "rotary_emb.inv_freq", c.transformer_config());
    for (const char* p : {"weight", "bias"}) {
      const bool weight = std::string(p) == "weight";
      if (!weight && !c.arch.add_qkv_bias) continue;
      auto shape = [&](int64_t heads) {
        return weight ? Shape{heads * s.d, s.h} : Shape{heads * s.d};
      };
      Tensor q = hf.take(a + "q_proj." + p, shape(s.heads));
      Tensor k = hf.take(a + "k_proj." + p, shape(s.groups));
      Tensor v = hf.take(a + "v_proj." + p, shape(s.groups));
      if (q.defined() && k.defined() && v.defined())
        put(us + "self_attention.query_key_value." + p, group_qkv(q, k, v, s));
    }
    if (c.arch.qk_layernorm)
      for (const char* qk : {"q", "k"})
        put(us + "self_attention." + qk + "_layernorm.weight",
            hf.take(a + qk + "_norm.weight", {s.d}));
    put(us + "self_attention.dense.weight", hf.take(a + "o_proj.weight", {s.h, s.heads * s.d}));
    put(us + "post_attention_layernorm.weight",
        hf.take(hl + "post_attention_layernorm.weight", {s.h}));
    if (c.arch.moe.is_moe_layer(i, c.num_layers)) {
      take_sparse_block(hf, c, i, ours);
      continue;
    }
    put(us + "mlp.dense_h_to_4h.weight",
        take_gated_fc1(hf, hl + "mlp.gate_proj.weight", hl + "mlp.up_proj.weight", s.f, s.h));
    put(us + "mlp.dense_4h_to_h.weight", hf.take(hl + "mlp.down_proj.weight", {s.h, s.f}));
  }
  put("final_layernorm.weight", hf.take("norm.weight", {s.h}));
  if (c.arch.untie_embeddings_and_output_weights) {
    Tensor head = hf.take("lm_head.weight", {s.vocab, s.h});
    if (head.defined()) put("output_layer.weight", pad_rows(head, s.padded_vocab));
  } else if (hf.has("lm_head.weight")) {
    // Tied checkpoints may carry the head anyway; it must be the embedding.
    Tensor head = hf.take("lm_head.weight", {s.vocab, s.h});
    const auto it = ours.find("embedding.word_embeddings.weight");
    MT_REQUIRE(
        !head.defined() || it == ours.end() ||
            head.to_vector<float>() == it->second.slice(0, 0, s.vocab).clone().to_vector<float>(),
        "HF Llama config.json says tie_word_embeddings = true, but lm_head.weight differs "
        "from embed_tokens.weight");
  }
  hf.finish();
  return ours;
}

TensorMap hf_llama_tensors_from_gpt(const TensorMap& ours, const GptConfig& c) {
  const Shapes s = shapes(c);
  auto get = [&](const std::string& name) -> const Tensor& { return our_tensor(ours, name); };
  TensorMap hf;
  hf["model.embed_tokens.weight"] =
      get("embedding.word_embeddings.weight").slice(0, 0, s.vocab).clone();
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string hl = "model." + layer(i), us = layer(i);
    hf[hl + "input_layernorm.weight"] = get(us + "input_layernorm.weight").clone();
    for (const char* p : {"weight", "bias"}) {
      if (std::string(p) == "bias" && !c.arch.add_qkv_bias) continue;
      const Tensor& qkv = get(us + "self_attention.query_key_value." + p);
      hf[hl + "self_attn.q_proj." + p] = ungroup_qkv(qkv, 0, s.queries, s);
      hf[hl + "self_attn.k_proj." + p] = ungroup_qkv(qkv, s.queries, 1, s);
      hf[hl + "self_attn.v_proj." + p] = ungroup_qkv(qkv, s.queries + 1, 1, s);
    }
    if (c.arch.qk_layernorm)
      for (const char* qk : {"q", "k"})
        hf[hl + "self_attn." + qk + "_norm.weight"] =
            get(us + "self_attention." + qk + "_layernorm.weight").clone();
    hf[hl + "self_attn.o_proj.weight"] = get(us + "self_attention.dense.weight").clone();
    hf[hl + "post_attention_layernorm.weight"] =
        get(us + "post_attention_layernorm.weight").clone();
    if (c.arch.moe.is_moe_layer(i, c.num_layers)) {
      put_sparse_block(ours, c, i, hf);
      continue;
    }
    const Tensor fc1 = get(us + "mlp.dense_h_to_4h.weight").view({2, s.f, s.h});
    hf[hl + "mlp.gate_proj.weight"] = fc1.select(0, 0).clone();
    hf[hl + "mlp.up_proj.weight"] = fc1.select(0, 1).clone();
    hf[hl + "mlp.down_proj.weight"] = get(us + "mlp.dense_4h_to_h.weight").clone();
  }
  hf["model.norm.weight"] = get("final_layernorm.weight").clone();
  if (c.arch.untie_embeddings_and_output_weights)
    hf["lm_head.weight"] = get("output_layer.weight").slice(0, 0, s.vocab).clone();
  return hf;
}

}  // namespace megatron
