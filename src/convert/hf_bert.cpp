#include "convert/hf_bert.h"

#include <cstring>
#include <set>

#include "convert/hf_gelu.h"
#include "convert/hf_tensor.h"
#include "core/decimal.h"

namespace megatron {
namespace {

// One-to-one tensors; `padded` ones get zero rows up to the padded vocabulary.
struct BertMapping {
  std::string hf, ours;
  Shape hf_shape;
  bool padded = false;
};

std::vector<BertMapping> mappings(const BertConfig& c) {
  const int64_t h = c.hidden_size, f = c.ffn_hidden_size > 0 ? c.ffn_hidden_size : 4 * h;
  std::vector<BertMapping> m = {
      {"bert.embeddings.word_embeddings.weight",
       "embedding.word_embeddings.weight",
       {c.vocab_size, h},
       true},
      {"bert.embeddings.position_embeddings.weight",
       "embedding.position_embeddings.weight",
       {c.max_position_embeddings, h}},
      {"bert.embeddings.token_type_embeddings.weight",
       "embedding.tokentype_embeddings.weight",
       {c.num_tokentypes, h}},
      {"cls.predictions.transform.dense.weight", "lm_head.dense.weight", {h, h}},
      {"cls.predictions.transform.dense.bias", "lm_head.dense.bias", {h}},
      {"cls.predictions.bias", "lm_head.bias", {c.vocab_size}, true},
  };
  const bool pre_ln = !c.post_layernorm();  // MegatronBertForPreTraining
  for (const char* p : {"weight", "bias"}) {
    if (pre_ln)
      m.push_back({std::string("bert.encoder.ln.") + p, std::string("final_layernorm.") + p, {h}});
    else
      m.push_back({std::string("bert.embeddings.LayerNorm.") + p,
                   std::string("embedding.layernorm.") + p,
                   {h}});
    m.push_back({std::string("cls.predictions.transform.LayerNorm.") + p,
                 std::string("lm_head.layernorm.") + p,
                 {h}});
  }
  if (c.binary_head) {
    m.push_back({"bert.pooler.dense.weight", "pooler.dense.weight", {h, h}});
    m.push_back({"bert.pooler.dense.bias", "pooler.dense.bias", {h}});
    m.push_back({"cls.seq_relationship.weight", "binary_head.weight", {2, h}});
    m.push_back({"cls.seq_relationship.bias", "binary_head.bias", {2}});
  }
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string hf = "bert.encoder.layer." + std::to_string(i) + ".",
                      us = "layers." + std::to_string(i) + ".";
    for (const std::string p : {"weight", "bias"}) {
      const bool w = p == "weight";
      m.push_back({hf + "attention.output.dense." + p, us + "self_attention.dense." + p,
                   w ? Shape{h, h} : Shape{h}});
      if (pre_ln) {  // the LayerNorms before attention and before the MLP
        m.push_back({hf + "attention.ln." + p, us + "input_layernorm." + p, {h}});
        m.push_back({hf + "ln." + p, us + "post_attention_layernorm." + p, {h}});
      } else {
        m.push_back(
            {hf + "attention.output.LayerNorm." + p, us + "post_attention_layernorm." + p, {h}});
        m.push_back({hf + "output.LayerNorm." + p, us + "post_mlp_layernorm." + p, {h}});
      }
      m.push_back({hf + "intermediate.dense." + p, us + "mlp.dense_h_to_4h." + p,
                   w ? Shape{f, h} : Shape{f}});
      m.push_back(
          {hf + "output.dense." + p, us + "mlp.dense_4h_to_h." + p, w ? Shape{h, f} : Shape{h}});
    }
  }
  return m;
}

const char* const kQkv[] = {"query", "key", "value"};

// HF's model_type of MegatronBertForPreTraining (Megatron-LM's pre-LayerNorm BERT).
constexpr char kMegatronBertType[] = "megatron-bert";

// HF names as BertForPreTraining stores them: a bare BertModel's names get "bert.", TF-era
// LayerNorm gamma/beta become weight/bias.
std::string canonical_name(const std::string& name) {
  std::string n = name.starts_with("bert.") || name.starts_with("cls.") ? name : "bert." + name;
  if (n.ends_with("LayerNorm.gamma")) n = n.substr(0, n.size() - 5) + "weight";
  if (n.ends_with("LayerNorm.beta")) n = n.substr(0, n.size() - 4) + "bias";
  return n;
}

bool same_values(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(hf_tensor_to_f32(a, "BERT").raw_data(), hf_tensor_to_f32(b, "BERT").raw_data(),
                     a.numel() * sizeof(float)) == 0;
}

}  // namespace

bool hf_bert_has_binary_head(const TensorMap& hf) {
  bool pooler = false, sop = false;
  for (const auto& [name, t] : hf) {
    pooler |= canonical_name(name) == "bert.pooler.dense.weight";
    sop |= canonical_name(name) == "cls.seq_relationship.weight";
  }
  return pooler && sop;
}

BertConfig bert_config_from_hf(const nlohmann::json& j, int64_t padded_vocab_size,
                               bool binary_head) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    MT_REQUIRE(j.contains(key), "HF BERT config.json has no '", key, "'");
    return j.at(key);
  };
  BertConfig c;
  c.num_layers = need("num_hidden_layers").get<int>();
  c.hidden_size = need("hidden_size").get<int>();
  c.num_attention_heads = need("num_attention_heads").get<int>();
  c.ffn_hidden_size = need("intermediate_size").get<int>();
  c.vocab_size = need("vocab_size").get<int64_t>();
  c.padded_vocab_size = padded_vocab_size;
  c.max_position_embeddings = need("max_position_embeddings").get<int>();
  c.seq_length = c.max_position_embeddings;
  c.num_tokentypes = j.value("type_vocab_size", 2);
  c.layernorm_epsilon = j.value("layer_norm_eps", 1e-12f);
  c.hidden_dropout = j.value("hidden_dropout_prob", 0.1f);
  c.attention_dropout = j.value("attention_probs_dropout_prob", 0.1f);
  c.layernorm_order = j.value("model_type", std::string("bert")) == kMegatronBertType
                          ? LayerNormOrder::kPreLayerNorm
                          : LayerNormOrder::kPostLayerNorm;
  c.binary_head = binary_head;
  const std::string position = j.value("position_embedding_type", std::string("absolute"));
  MT_REQUIRE(position == "absolute", "HF BERT position_embedding_type '", position,
             "' is not supported (expected \"absolute\")");
  c.gelu = gelu_form_from_hf(j.value("hidden_act", std::string("gelu")), "BERT", "hidden_act");
  return c;
}

nlohmann::json hf_config_from_bert(const BertConfig& c) {
  const bool post = c.post_layernorm();
  return {{"architectures", {post ? "BertForPreTraining" : "MegatronBertForPreTraining"}},
          {"model_type", post ? "bert" : kMegatronBertType},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_attention_heads},
          {"intermediate_size", c.ffn_hidden_size > 0 ? c.ffn_hidden_size : 4 * c.hidden_size},
          {"hidden_act", hf_gelu_name(c.gelu)},
          {"hidden_dropout_prob", as_written(c.hidden_dropout)},
          {"attention_probs_dropout_prob", as_written(c.attention_dropout)},
          {"max_position_embeddings", c.max_position_embeddings},
          {"type_vocab_size", c.num_tokentypes},
          {"initializer_range", as_written(c.init_method_std)},
          {"layer_norm_eps", as_written(c.layernorm_epsilon)},
          {"position_embedding_type", "absolute"},
          {"tie_word_embeddings", true}};
}

TensorMap bert_tensors_from_hf(const TensorMap& hf_in, const BertConfig& c) {
  TensorMap hf;
  for (const auto& [name, t] : hf_in) hf[canonical_name(name)] = t;
  std::string errors;
  std::set<std::string> used = {"bert.embeddings.position_ids"};
  auto fetch = [&](const std::string& name, const Shape& shape) -> Tensor {
    auto it = hf.find(name);
    if (it == hf.end()) {
      errors += "\n  missing " + name + " " + shape_str(shape);
      return Tensor();
    }
    used.insert(name);
    if (it->second.shape() != shape) {
      errors += "\n  " + name + ": shape " + shape_str(it->second.shape()) + ", expected " +
                shape_str(shape);
      return Tensor();
    }
    return hf_tensor_to_f32(it->second, "BERT");
  };

  TensorMap ours;
  for (const BertMapping& m : mappings(c)) {
    Tensor t = fetch(m.hf, m.hf_shape);
    if (!t.defined()) continue;
    if (!m.padded) {
      ours[m.ours] = t;
      continue;
    }
    Shape full = m.hf_shape;
    full[0] = c.padded_vocab_size;
    Tensor padded = Tensor::zeros(full, DType::F32);
    padded.slice(0, 0, c.vocab_size).copy_from(t);
    ours[m.ours] = padded;
  }
  const int64_t h = c.hidden_size, heads = c.num_attention_heads, d = h / heads;
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string hf_prefix = "bert.encoder.layer." + std::to_string(i) + ".attention.self.",
                      us = "layers." + std::to_string(i) + ".self_attention.query_key_value.";
    for (const bool weight : {true, false}) {
      // Fused rows per head: row (head, j, e) ← row head·d + e of Q, K or V (j = 0, 1, 2).
      const Shape one = weight ? Shape{h, h} : Shape{h};
      Tensor fused = Tensor::empty(weight ? Shape{3 * h, h} : Shape{3 * h}, DType::F32);
      const int64_t cols = weight ? h : 1;
      bool complete = true;
      for (int j = 0; j < 3; ++j) {
        Tensor part = fetch(hf_prefix + kQkv[j] + (weight ? ".weight" : ".bias"), one);
        if (!part.defined()) {
          complete = false;
          continue;
        }
        const float* src = part.data<float>();
        float* dst = fused.data<float>();
        for (int64_t head = 0; head < heads; ++head)
          std::memcpy(dst + ((head * 3 + j) * d) * cols, src + head * d * cols,
                      size_t(d * cols) * sizeof(float));
      }
      if (complete) ours[us + (weight ? "weight" : "bias")] = fused;
    }
  }
  // Tied decoder copies, when a file carries them, must equal what they are tied to.
  if (auto it = hf.find("cls.predictions.decoder.weight"); it != hf.end()) {
    used.insert(it->first);
    auto word = hf.find("bert.embeddings.word_embeddings.weight");
    if (word != hf.end() && !same_values(it->second, word->second))
      errors +=
          "\n  cls.predictions.decoder.weight differs from the word embeddings (untied "
          "MLM decoders are not supported)";
  }
  if (auto it = hf.find("cls.predictions.decoder.bias"); it != hf.end()) {
    used.insert(it->first);
    auto bias = hf.find("cls.predictions.bias");
    if (bias != hf.end() && !same_values(it->second, bias->second))
      errors += "\n  cls.predictions.decoder.bias differs from cls.predictions.bias";
  }
  for (const auto& [name, t] : hf)
    if (!used.count(name)) errors += "\n  unexpected " + name + " " + shape_str(t.shape());
  MT_REQUIRE(errors.empty(), "HF BERT weights do not match config.json:", errors);
  return ours;
}

TensorMap hf_tensors_from_bert(const TensorMap& ours, const BertConfig& c) {
  auto get = [&](const std::string& name) -> const Tensor& {
    auto it = ours.find(name);
    MT_REQUIRE(it != ours.end(), "BERT export: no tensor '", name, "'");
    return it->second;
  };
  TensorMap hf;
  for (const BertMapping& m : mappings(c)) {
    const Tensor& t = get(m.ours);
    hf[m.hf] = (m.padded ? t.slice(0, 0, c.vocab_size) : t).clone();
  }
  const int64_t h = c.hidden_size, heads = c.num_attention_heads, d = h / heads;
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string hf_prefix = "bert.encoder.layer." + std::to_string(i) + ".attention.self.",
                      us = "layers." + std::to_string(i) + ".self_attention.query_key_value.";
    for (const bool weight : {true, false}) {
      const Tensor fused = get(us + (weight ? "weight" : "bias")).clone();
      const int64_t cols = weight ? h : 1;
      for (int j = 0; j < 3; ++j) {
        Tensor part = Tensor::empty(weight ? Shape{h, h} : Shape{h}, DType::F32);
        for (int64_t head = 0; head < heads; ++head)
          std::memcpy(part.data<float>() + head * d * cols,
                      fused.data<float>() + ((head * 3 + j) * d) * cols,
                      size_t(d * cols) * sizeof(float));
        hf[hf_prefix + kQkv[j] + (weight ? ".weight" : ".bias")] = part;
      }
    }
  }
  return hf;
}

}  // namespace megatron
