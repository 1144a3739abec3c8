#include "convert/hf_gpt2.h"

#include <cstring>
#include <sstream>

#include "convert/hf_directory.h"
#include "convert/hf_gelu.h"
#include "convert/hf_tensor.h"
#include "core/decimal.h"

namespace megatron {
namespace {

// [3, heads, head_dim, ...] <-> [heads, 3, head_dim, ...] on the leading 3·h rows.
Tensor swap_qkv_and_heads(const Tensor& t, int64_t first, int64_t second) {
  Shape grouped = {first, second, t.size(0) / (first * second)};
  for (int64_t d = 1; d < t.dim(); ++d) grouped.push_back(t.size(d));
  return t.view(grouped).transpose(0, 1).clone().view(t.shape());
}

struct Gpt2Mapping {
  std::string hf, ours;
  enum Kind { kCopy, kTranspose, kQkvWeight, kQkvBias, kWordEmbedding } kind;
  Shape hf_shape;
};

std::vector<Gpt2Mapping> mappings(const GptConfig& c) {
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size > 0 ? c.ffn_hidden_size : 4 * h;
  std::vector<Gpt2Mapping> m = {
      {"wte.weight",
       "embedding.word_embeddings.weight",
       Gpt2Mapping::kWordEmbedding,
       {c.vocab_size, h}},
      {"wpe.weight",
       "embedding.position_embeddings.weight",
       Gpt2Mapping::kCopy,
       {c.max_position_embeddings, h}},
  };
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string hf = "h." + std::to_string(i) + ".", us = "layers." + std::to_string(i) + ".";
    for (const char* p : {"weight", "bias"}) {
      m.push_back({hf + "ln_1." + p, us + "input_layernorm." + p, Gpt2Mapping::kCopy, {h}});
      m.push_back(
          {hf + "ln_2." + p, us + "post_attention_layernorm." + p, Gpt2Mapping::kCopy, {h}});
    }
    m.push_back({hf + "attn.c_attn.weight",
                 us + "self_attention.query_key_value.weight",
                 Gpt2Mapping::kQkvWeight,
                 {h, 3 * h}});
    m.push_back({hf + "attn.c_attn.bias",
                 us + "self_attention.query_key_value.bias",
                 Gpt2Mapping::kQkvBias,
                 {3 * h}});
    m.push_back({hf + "attn.c_proj.weight",
                 us + "self_attention.dense.weight",
                 Gpt2Mapping::kTranspose,
                 {h, h}});
    m.push_back(
        {hf + "attn.c_proj.bias", us + "self_attention.dense.bias", Gpt2Mapping::kCopy, {h}});
    m.push_back(
        {hf + "mlp.c_fc.weight", us + "mlp.dense_h_to_4h.weight", Gpt2Mapping::kTranspose, {h, f}});
    m.push_back({hf + "mlp.c_fc.bias", us + "mlp.dense_h_to_4h.bias", Gpt2Mapping::kCopy, {f}});
    m.push_back({hf + "mlp.c_proj.weight",
                 us + "mlp.dense_4h_to_h.weight",
                 Gpt2Mapping::kTranspose,
                 {f, h}});
    m.push_back({hf + "mlp.c_proj.bias", us + "mlp.dense_4h_to_h.bias", Gpt2Mapping::kCopy, {h}});
  }
  for (const char* p : {"weight", "bias"})
    m.push_back(
        {std::string("ln_f.") + p, std::string("final_layernorm.") + p, Gpt2Mapping::kCopy, {h}});
  return m;
}

}  // namespace

GptConfig gpt_config_from_hf(const nlohmann::json& j, int64_t padded_vocab_size) {
  MT_REQUIRE(j.is_object(), "HF GPT-2 config.json is not a JSON object");
  if (j.contains("model_type"))
    MT_REQUIRE(j["model_type"] == "gpt2", "HF config.json has model_type ", j["model_type"].dump(),
               ", expected \"gpt2\"");
  const kernels::GeluForm gelu = gelu_form_from_hf(
      j.value("activation_function", std::string("gelu_new")), "GPT-2", "activation_function");
  MT_REQUIRE(j.value("scale_attn_weights", true),
             "HF GPT-2 config.json: scale_attn_weights = "
             "false is not supported");
  MT_REQUIRE(!j.value("scale_attn_by_inverse_layer_idx", false),
             "HF GPT-2 config.json: scale_attn_by_inverse_layer_idx = true is not supported");
  MT_REQUIRE(j.value("tie_word_embeddings", true),
             "HF GPT-2 config.json: tie_word_embeddings = false is not supported");
  GptConfig c;
  c.num_layers = required_config_field<int>(j, "n_layer", "HF GPT-2");
  c.hidden_size = required_config_field<int>(j, "n_embd", "HF GPT-2");
  c.num_attention_heads = required_config_field<int>(j, "n_head", "HF GPT-2");
  c.ffn_hidden_size = j.contains("n_inner") && !j["n_inner"].is_null()
                          ? required_config_field<int>(j, "n_inner", "HF GPT-2")
                          : 0;
  c.vocab_size = required_config_field<int64_t>(j, "vocab_size", "HF GPT-2");
  c.padded_vocab_size = padded_vocab_size;
  c.max_position_embeddings = required_config_field<int>(j, "n_positions", "HF GPT-2");
  c.seq_length = c.max_position_embeddings;
  c.layernorm_epsilon = j.value("layer_norm_epsilon", 1e-5f);
  c.hidden_dropout = j.value("resid_pdrop", 0.1f);
  c.attention_dropout = j.value("attn_pdrop", 0.1f);
  c.init_method_std = j.value("initializer_range", 0.02f);
  c.gelu = gelu;
  MT_REQUIRE(c.padded_vocab_size >= c.vocab_size, "padded vocabulary size ", c.padded_vocab_size,
             " is smaller than the HF vocab_size ", c.vocab_size);
  return c;
}

nlohmann::json hf_config_from_gpt(const GptConfig& c) {
  // GPT-2's config.json has no keys for other architectures, and its checkpoints no tensors:
  // an untied output layer would be dropped without a word, the rest would not map.
  const ArchitectureOptions& a = c.arch;
  MT_REQUIRE(!a.moe.enabled(),
             "a mixture-of-experts model does not export to HF GPT-2: Mixtral / Qwen-MoE export "
             "is not implemented; keep it in megatron-cpp's format");
  MT_REQUIRE(!a.mla.enabled,
             "a multi-latent-attention model does not export to HF: DeepSeek-V2/V3 export is not "
             "implemented; keep it in megatron-cpp's format");
  MT_REQUIRE(
      a.normalization == Normalization::kLayerNorm &&
          a.position_embedding == PositionEmbedding::kLearnedAbsolute && !a.swiglu &&
          (a.num_query_groups == 0 || a.num_query_groups == c.num_attention_heads) &&
          (a.kv_channels == 0 || a.kv_channels * c.num_attention_heads == c.hidden_size) &&
          a.add_bias_linear && !a.untie_embeddings_and_output_weights && !a.apply_layernorm_1p &&
          !a.squared_relu && !a.qk_layernorm,
      "only GPT-2-style models (LayerNorm with its plain gain, learned absolute positions, a "
      "GeLU MLP, no QK LayerNorm, one KV group per head, linear biases, "
      "an output layer "
      "tied to the word embedding) export to HF GPT-2; RMSNorm + RoPE + SwiGLU models "
      "export to HF Llama");
  MT_REQUIRE(!a.mup.enabled,
             "HF GPT-2's config.json has no muP attention scale or multipliers: a --use-mup "
             "model does not export to it");
  nlohmann::json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["activation_function"] = hf_gelu_name(c.gelu);
  j["vocab_size"] = c.vocab_size;
  j["n_positions"] = c.max_position_embeddings;
  j["n_ctx"] = c.max_position_embeddings;
  j["n_embd"] = c.hidden_size;
  j["n_layer"] = c.num_layers;
  j["n_head"] = c.num_attention_heads;
  j["n_inner"] = c.ffn_hidden_size > 0 && c.ffn_hidden_size != 4 * c.hidden_size
                     ? nlohmann::json(c.ffn_hidden_size)
                     : nlohmann::json(nullptr);
  j["layer_norm_epsilon"] = as_written(c.layernorm_epsilon);
  j["initializer_range"] = as_written(c.init_method_std);
  j["resid_pdrop"] = as_written(c.hidden_dropout);
  j["embd_pdrop"] = as_written(c.hidden_dropout);
  j["attn_pdrop"] = as_written(c.attention_dropout);
  j["tie_word_embeddings"] = true;
  return j;
}

TensorMap gpt_tensors_from_hf(const TensorMap& hf_in, const GptConfig& c) {
  // Strip the GPT2LMHeadModel prefix and drop what is not a parameter of the transformer.
  TensorMap hf;
  Tensor lm_head;
  for (const auto& [raw, t] : hf_in) {
    std::string name = raw.rfind("transformer.", 0) == 0 ? raw.substr(12) : raw;
    if (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias")) continue;
    if (name == "lm_head.weight") {
      lm_head = t;
      continue;
    }
    hf[name] = t;
  }
  std::ostringstream problems;
  int count = 0;
  TensorMap ours;
  const int64_t heads = c.num_attention_heads;
  for (const Gpt2Mapping& m : mappings(c)) {
    auto it = hf.find(m.hf);
    if (it == hf.end()) {
      problems << "\n  " << m.hf << ": missing (expected shape " << shape_str(m.hf_shape) << ")";
      ++count;
      continue;
    }
    if (it->second.shape() != m.hf_shape) {
      problems << "\n  " << m.hf << ": shape " << shape_str(it->second.shape()) << ", expected "
               << shape_str(m.hf_shape);
      ++count;
      hf.erase(it);
      continue;
    }
    Tensor t = hf_tensor_to_f32(it->second, "GPT-2");
    hf.erase(it);
    switch (m.kind) {
      case Gpt2Mapping::kCopy:
        ours[m.ours] = t;
        break;
      case Gpt2Mapping::kTranspose:
        ours[m.ours] = transposed_matrix(t);
        break;
      case Gpt2Mapping::kQkvWeight:
        ours[m.ours] = swap_qkv_and_heads(transposed_matrix(t), 3, heads);
        break;
      case Gpt2Mapping::kQkvBias:
        ours[m.ours] = swap_qkv_and_heads(t, 3, heads);
        break;
      case Gpt2Mapping::kWordEmbedding: {
        Tensor padded = Tensor::zeros({c.padded_vocab_size, c.hidden_size}, DType::F32);
        padded.slice(0, 0, c.vocab_size).copy_from(t);
        ours[m.ours] = padded;
        if (lm_head.defined()) {
          bool tied = lm_head.shape() == t.shape() &&
                      std::memcmp(hf_tensor_to_f32(lm_head, "GPT-2").raw_data(), t.raw_data(),
                                  t.nbytes()) == 0;
          MT_REQUIRE(tied,
                     "HF GPT-2 lm_head.weight differs from wte.weight: untied LM heads are "
                     "not supported");
        }
        break;
      }
    }
  }
  for (const auto& [name, t] : hf) {
    problems << "\n  " << name << ": unexpected tensor " << shape_str(t.shape());
    ++count;
  }
  MT_REQUIRE(count == 0, "HF GPT-2 weights do not match config.json (", count, " problem",
             count == 1 ? "" : "s", "):", problems.str());
  return ours;
}

TensorMap hf_tensors_from_gpt(const TensorMap& ours, const GptConfig& c) {
  TensorMap hf;
  const int64_t heads = c.num_attention_heads;
  for (const Gpt2Mapping& m : mappings(c)) {
    auto it = ours.find(m.ours);
    MT_REQUIRE(it != ours.end(), "no tensor '", m.ours, "' to export to HF GPT-2");
    const Tensor& t = it->second;
    switch (m.kind) {
      case Gpt2Mapping::kCopy:
        hf[m.hf] = t.clone();
        break;
      case Gpt2Mapping::kTranspose:
        hf[m.hf] = transposed_matrix(t);
        break;
      case Gpt2Mapping::kQkvWeight:
        hf[m.hf] = transposed_matrix(swap_qkv_and_heads(t, heads, 3));
        break;
      case Gpt2Mapping::kQkvBias:
        hf[m.hf] = swap_qkv_and_heads(t, heads, 3);
        break;
      case Gpt2Mapping::kWordEmbedding:
        hf[m.hf] = t.slice(0, 0, c.vocab_size).clone();
        break;
    }
    MT_REQUIRE(hf[m.hf].shape() == m.hf_shape, "tensor '", m.ours, "' has shape ",
               shape_str(t.shape()), ", which does not give HF ", m.hf, " ", shape_str(m.hf_shape));
  }
  return hf;
}

}  // namespace megatron
