#include "train/checkpoint_convert_bert.h"

#include <random>

#include "model/bert_model.h"
#include "model/gpt_model.h"  // padded_vocab_size
#include "model/hf_bert.h"
#include "parallel/full_tensors.h"
#include "train/checkpoint.h"
#include "train/hf_directory.h"

namespace megatron {
namespace {

// The parameters BertModel registers for TP rank `rank` of `size`, allocated (zeros). The
// model is built only for its registrations: no communicator is used.
ParameterStore bert_parameter_store(const BertConfig& config, int rank, int size) {
  ParallelState ps;
  ps.tp_rank = rank;
  ps.tp_size = size;
  ParameterStore store(rank, size);
  BertModel model(config, ps, store);
  store.allocate();
  return store;
}

uint64_t nonce() {
  return (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
}

}  // namespace

nlohmann::json bert_model_shape_json(const BertConfig& c) {
  return {{"num_layers", c.num_layers},
          {"hidden_size", c.hidden_size},
          {"num_attention_heads", c.num_attention_heads},
          {"ffn_hidden_size", c.ffn_hidden_size > 0 ? c.ffn_hidden_size : 4 * c.hidden_size},
          {"padded_vocab_size", c.padded_vocab_size},
          {"vocab_size", c.vocab_size},
          {"max_position_embeddings", c.max_position_embeddings},
          {"num_tokentypes", c.num_tokentypes},
          {"layernorm_epsilon", c.layernorm_epsilon},
          {"layernorm_order", c.post_layernorm() ? "post" : "pre"},
          {"binary_head", c.binary_head}};
}

void import_hf_bert(const std::string& hf_dir, const std::string& save_dir, int target_tp,
                    int make_vocab_size_divisible_by) {
  MT_CHECK(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  HfDirectory hf = read_hf_directory(hf_dir);
  const int64_t real_vocab = hf.config.value("vocab_size", int64_t(0));
  const BertConfig config = bert_config_from_hf(
      hf.config, padded_vocab_size(real_vocab, make_vocab_size_divisible_by, target_tp),
      hf_bert_has_binary_head(hf.tensors));
  const TensorMap full = bert_tensors_from_hf(hf.tensors, config);
  nlohmann::json args = bert_model_shape_json(config);
  args["make_vocab_size_divisible_by"] = make_vocab_size_divisible_by;
  args["tensor_model_parallel_size"] = target_tp;
  const nlohmann::json state = {{"iteration", 0},
                                {"consumed_train_samples", 0},
                                {"consumed_valid_samples", 0},
                                {"model", bert_model_shape_json(config)},
                                {"args", args},
                                {"converted_from", {{"format", "hf-bert"}, {"path", hf_dir}}}};
  CheckpointTransaction transaction(save_dir, 0, nonce());
  for (int rank = 0; rank < target_tp; ++rank) {
    ParameterStore store = bert_parameter_store(config, rank, target_tp);
    assign_from_full_tensors(full, store);
    write_checkpoint_rank(transaction.path(), 0, store, {}, state, {rank, target_tp, 0, 1});
  }
  transaction.commit();
}

void export_hf_bert(const std::string& load_dir, int64_t iteration, const std::string& hf_dir) {
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  const nlohmann::json state = reader.state(0, 0);
  const std::string& dir = reader.iteration_dir();
  MT_CHECK(state.contains("model"), "checkpoint '", dir,
           "': state.json has no model record (not a BERT checkpoint of this program?)");
  const nlohmann::json& m = state["model"];
  auto field = [&](const char* key) -> const nlohmann::json& {
    MT_CHECK(m.contains(key), "checkpoint '", dir, "': state.json has no model.", key,
             " (needed to export the model)");
    return m[key];
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
  const nlohmann::json hf_config = hf_config_from_bert(c);  // rejects pre-LN models

  ParameterStore expected = bert_parameter_store(c, 0, 1);
  check_checkpoint_matches(reader, expected, true);
  TensorMap full;
  for (const std::string& name : reader.names()) {
    Tensor t = Tensor::empty(reader.placement(name).full_shape, DType::F32);
    reader.read_model(name, t, -1, 0);
    full[name] = t;
  }
  write_hf_directory(hf_dir, {hf_config, hf_tensors_from_bert(full, c)});
}

}  // namespace megatron
