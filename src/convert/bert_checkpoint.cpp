#include "convert/bert_checkpoint.h"

#include "checkpoint/architecture_json.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/model_shape.h"
#include "convert/convert_common.h"
#include "convert/hf_bert.h"
#include "convert/hf_directory.h"
#include "convert/hf_model_card.h"
#include "model/bert_model.h"
#include "model/gpt_model.h"  // padded_vocab_size

namespace megatron {

nlohmann::json bert_hf_description(const BertConfig& c) {
  nlohmann::json d = bert_model_shape_json(c);
  d["hidden_dropout"] = c.hidden_dropout;
  d["attention_dropout"] = c.attention_dropout;
  d["init_method_std"] = c.init_method_std;
  return d;
}

void import_hf_bert(const std::string& hf_dir, const std::string& save_dir, int target_tp,
                    int make_vocab_size_divisible_by) {
  MT_REQUIRE(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  HfDirectory hf = read_hf_directory(hf_dir);
  const int64_t real_vocab = hf.config.value("vocab_size", int64_t(0));
  const BertConfig config = bert_config_from_hf(
      hf.config, padded_vocab_size(real_vocab, make_vocab_size_divisible_by, target_tp),
      hf_bert_has_binary_head(hf.tensors));
  const TensorMap full = bert_tensors_from_hf(hf.tensors, config);
  write_imported_checkpoint<BertModel>(
      save_dir, config, full,
      imported_checkpoint_state(bert_model_shape_json(config), bert_hf_description(config),
                                make_vocab_size_divisible_by, target_tp, "hf-bert", hf_dir,
                                hf.config_text),
      target_tp);
}

BertConfig bert_config_from_checkpoint_state(const nlohmann::json& state, const std::string& dir) {
  MT_REQUIRE(state.contains("model"), "checkpoint '", dir,
             "': state.json has no model record (not a BERT checkpoint of this program?)");
  auto field = [&](const char* key) {
    return state_field<nlohmann::json>(state, "model", key, dir);
  };
  BertConfig c;
  c.num_layers = field("num_layers").get<int>();
  c.hidden_size = field("hidden_size").get<int>();
  c.num_attention_heads = field("num_attention_heads").get<int>();
  c.ffn_hidden_size = field("ffn_hidden_size").get<int>();
  c.padded_vocab_size = field("padded_vocab_size").get<int64_t>();
  c.vocab_size = field("vocab_size").get<int64_t>();
  c.max_position_embeddings = field("max_position_embeddings").get<int>();
  c.seq_length = c.max_position_embeddings;
  c.num_tokentypes = field("num_tokentypes").get<int>();
  c.layernorm_epsilon = field("layernorm_epsilon").get<float>();
  c.layernorm_order = field("layernorm_order").get<std::string>() == "post"
                          ? LayerNormOrder::kPostLayerNorm
                          : LayerNormOrder::kPreLayerNorm;
  c.binary_head = field("binary_head").get<bool>();
  const nlohmann::json args = state.value("args", nlohmann::json::object());
  c.hidden_dropout = args.value("hidden_dropout", c.hidden_dropout);
  c.attention_dropout = args.value("attention_dropout", c.attention_dropout);
  c.init_method_std = args.value("init_method_std", c.init_method_std);
  c.gelu = gelu_form_from_args_json(state["model"]);
  return c;
}

ParameterStore bert_rank_parameters(const nlohmann::json& state, const std::string& dir,
                                    int tp_rank, int tp_size, const StageRange& stage) {
  return registered_parameter_store<BertModel>(bert_config_from_checkpoint_state(state, dir),
                                               tp_rank, tp_size, stage);
}

void export_hf_bert(const std::string& load_dir, int64_t iteration, const std::string& hf_dir,
                    const TokenizerFileOverrides& tokenizer) {
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  const nlohmann::json state = reader.state(0, 0);
  const std::string& dir = reader.iteration_dir();
  const BertConfig c = bert_config_from_checkpoint_state(state, dir);
  const nlohmann::json hf_config = hf_config_from_bert(c);  // MegatronBert when pre-LN

  const TensorMap full =
      read_full_model_tensors(reader, registered_parameter_store<BertModel>(c, 0, 1));
  const std::string config_text =
      exported_hf_config_text(state, hf_config, [&](const nlohmann::json& j) {
        return bert_hf_description(bert_config_from_hf(j, c.padded_vocab_size, c.binary_head));
      });
  write_hf_directory(hf_dir, {hf_config, hf_tensors_from_bert(full, c), {}}, 0, config_text);
  write_hf_tokenizer_files(hf_dir, checkpoint_tokenizer(state), c.vocab_size,
                           c.max_position_embeddings, tokenizer);
  write_hf_model_card(hf_dir, state, dir);
}

}  // namespace megatron
