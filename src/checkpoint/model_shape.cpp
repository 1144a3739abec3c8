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

std::string model_shape_differences(const nlohmann::json& stored, const nlohmann::json& want,
                                    const std::set<std::string>& ignored) {
  std::string differences;
  for (const auto& [key, value] : want.items()) {
    if (!stored.contains(key) || ignored.count(key)) continue;
    if (stored[key] != value)
      differences +=
          "\n  " + key + ": checkpoint " + stored[key].dump() + ", flags " + value.dump();
  }
  return differences;
}

}  // namespace megatron
