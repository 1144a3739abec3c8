#include "checkpoint/model_shape.h"

#include "checkpoint/architecture_json.h"

namespace megatron {
namespace {

// The shape fields the GPT and BERT model records (state.json "model") share: layers, hidden
// size, heads, FFN size (a config's 0 written as its meaning, 4 × hidden), padded and real
// vocabulary sizes, positions.
nlohmann::json transformer_shape_json(const LanguageModelConfig& c) {
  return {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"ffn_hidden_size", c.ffn_hidden_size > 0 ? c.ffn_hidden_size : 4 * c.hidden_size},
          {"padded_vocab_size", c.padded_vocab_size},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_position_embeddings}};
}

// A record with the attention head size written as "kv_channels" 0 where it is the implied
// hidden / heads (Megatron-LM fills it in, imports drop it, a flag may give it explicitly): the
// same model either way.
nlohmann::json canonical_shape(nlohmann::json shape) {
  if (shape.contains("kv_channels") && shape.contains("num_attention_heads") &&
      shape.contains("hidden_size") &&
      shape["kv_channels"].get<int64_t>() * shape["num_attention_heads"].get<int64_t>() ==
          shape["hidden_size"].get<int64_t>())
    shape["kv_channels"] = 0;
  return shape;
}

}  // namespace

nlohmann::json gpt_model_shape_json(const GptConfig& c) {
  nlohmann::json shape = transformer_shape_json(c);
  // The architecture options too: some change no parameter shape (RoPE vs no positions, the
  // RoPE base), so a resume with other flags must be caught here.
  shape.update(architecture_args_json(c.arch));
  shape.update(gelu_args_json(c.gelu));
  return shape;
}

nlohmann::json bert_model_shape_json(const BertConfig& c) {
  nlohmann::json shape = transformer_shape_json(c);
  shape.update({{"num_tokentypes", c.num_tokentypes},
                {"layernorm_epsilon", c.layernorm_epsilon},
                {"layernorm_order", c.post_layernorm() ? "post" : "pre"},
                {"binary_head", c.binary_head}});
  shape.update(gelu_args_json(c.gelu));
  return shape;
}

std::string model_shape_differences(const nlohmann::json& stored_record,
                                    const nlohmann::json& want_record,
                                    const std::set<std::string>& ignored) {
  const nlohmann::json stored = canonical_shape(stored_record);
  const nlohmann::json want = canonical_shape(want_record);
  std::string differences;
  for (const auto& [key, value] : want.items()) {
    if (!stored.contains(key) || ignored.count(key)) continue;
    if (stored[key] != value)
      differences += "\n  " + key + ": checkpoint " + stored_record[key].dump() + ", flags " +
                     want_record[key].dump();
  }
  return differences;
}

}  // namespace megatron
