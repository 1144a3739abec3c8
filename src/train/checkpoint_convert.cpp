#include "train/checkpoint_convert.h"

#include "core/durable_file.h"
#include "model/hf_gpt2.h"
#include "model/stage_range.h"
#include "train/architecture_json.h"
#include "train/checkpoint.h"
#include "train/convert_common.h"
#include "train/hf_directory.h"

namespace megatron {

nlohmann::json gpt_model_shape_json(const GptConfig& c) {
  nlohmann::json shape = {
      {"num_layers", c.num_layers},
      {"hidden_size", c.hidden_size},
      {"num_attention_heads", c.num_attention_heads},
      {"ffn_hidden_size", c.ffn_hidden_size > 0 ? c.ffn_hidden_size : 4 * c.hidden_size},
      {"padded_vocab_size", c.padded_vocab_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"vocab_size", c.vocab_size}};
  // The architecture options too: some change no parameter shape (RoPE vs no positions, the
  // RoPE base), so a resume with other flags must be caught here.
  shape.update(architecture_args_json(c.arch));
  shape.update(gelu_args_json(c.gelu));
  return shape;
}

nlohmann::json gpt_hf_description(const GptConfig& c) {
  nlohmann::json d = gpt_model_shape_json(c);
  d["layernorm_epsilon"] = c.layernorm_epsilon;
  d["hidden_dropout"] = c.hidden_dropout;
  d["attention_dropout"] = c.attention_dropout;
  d["init_method_std"] = c.init_method_std;
  return d;
}

nlohmann::json gpt_imported_args(const GptConfig& c) {
  nlohmann::json args = gpt_hf_description(c);
  args["seq_length"] = c.seq_length;
  args["norm_epsilon"] = c.layernorm_epsilon;
  return args;
}

void import_hf_gpt2(const std::string& hf_dir, const std::string& save_dir, int target_tp,
                    int make_vocab_size_divisible_by) {
  MT_REQUIRE(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  HfDirectory hf = read_hf_directory(hf_dir);
  const int64_t real_vocab = hf.config.value("vocab_size", int64_t(0));
  GptConfig config = gpt_config_from_hf(
      hf.config, padded_vocab_size(real_vocab, make_vocab_size_divisible_by, target_tp));
  const TensorMap full = gpt_tensors_from_hf(hf.tensors, config);

  write_imported_checkpoint<GptModel>(
      save_dir, config, full,
      imported_checkpoint_state(gpt_model_shape_json(config), gpt_imported_args(config),
                                make_vocab_size_divisible_by, target_tp, "hf-gpt2", hf_dir,
                                hf.config_text),
      target_tp);
}

void export_hf_gpt2(const std::string& load_dir, int64_t iteration, const std::string& hf_dir,
                    int64_t vocab_size, const TokenizerFileOverrides& tokenizer_files) {
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  const nlohmann::json state = reader.state(0, 0);
  const std::string& dir = reader.iteration_dir();
  GptConfig c;
  c.num_layers = state_field<int>(state, "model", "num_layers", dir);
  c.hidden_size = state_field<int>(state, "model", "hidden_size", dir);
  c.num_attention_heads = state_field<int>(state, "model", "num_attention_heads", dir);
  c.ffn_hidden_size = state_field<int>(state, "model", "ffn_hidden_size", dir);
  c.max_position_embeddings = state_field<int>(state, "model", "max_position_embeddings", dir);
  c.padded_vocab_size = state_field<int64_t>(state, "model", "padded_vocab_size", dir);
  c.seq_length = c.max_position_embeddings;
  const nlohmann::json args = state.value("args", nlohmann::json::object());
  c.layernorm_epsilon = args.value("layernorm_epsilon", 1e-5f);
  c.hidden_dropout = args.value("hidden_dropout", 0.1f);
  c.attention_dropout = args.value("attention_dropout", 0.1f);
  c.init_method_std = args.value("init_method_std", 0.02f);
  c.gelu = gelu_form_from_args_json(args);
  const nlohmann::json tokenizer = checkpoint_tokenizer(state);
  c.vocab_size = vocab_size > 0 ? vocab_size
                 : state["model"].contains("vocab_size")
                     ? state["model"]["vocab_size"].get<int64_t>()
                 : tokenizer.is_object() && tokenizer.contains("vocab_size")
                     ? tokenizer["vocab_size"].get<int64_t>()
                     : args.value("vocab_size", int64_t(0));
  MT_REQUIRE(c.vocab_size > 0 && c.vocab_size <= c.padded_vocab_size, "checkpoint '", dir,
             "': the real vocabulary size is unknown or larger than the padded ",
             c.padded_vocab_size, " (got ", c.vocab_size, "); pass --vocab-size");

  const TensorMap full =
      read_full_model_tensors(reader, registered_parameter_store<GptModel>(c, 0, 1));
  nlohmann::json config = hf_config_from_gpt(c);
  nlohmann::json generation = {{"_from_model_config", true}};
  const int64_t eod = tokenizer.is_object() ? tokenizer.value("eod", int64_t(-1)) : -1;
  if (eod >= 0) {
    for (nlohmann::json* j : {&config, &generation}) {
      (*j)["bos_token_id"] = eod;
      (*j)["eos_token_id"] = eod;
    }
  }
  const std::string config_text =
      exported_hf_config_text(state, config, [&](const nlohmann::json& j) {
        return gpt_hf_description(gpt_config_from_hf(j, c.padded_vocab_size));
      });
  write_hf_directory(hf_dir, {config, hf_tensors_from_gpt(full, c), {}}, 0, config_text);
  write_file_durably(hf_dir + "/generation_config.json", generation.dump(2) + "\n");
  write_hf_tokenizer_files(hf_dir, tokenizer, c.vocab_size, c.max_position_embeddings,
                           tokenizer_files);
}

void reshard_checkpoint(const std::string& load_dir, int64_t iteration, const std::string& save_dir,
                        int target_tp, int target_pp) {
  MT_CHECK(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  const int64_t it = resolve_checkpoint_iteration(load_dir, iteration);
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, it));
  nlohmann::json state = reader.state(0, 0);
  if (state.contains("args") && state["args"].is_object()) {
    state["args"]["tensor_model_parallel_size"] = target_tp;
    state["args"]["pipeline_model_parallel_size"] = target_pp;
  }
  // Which pipeline rank writes each tensor (the layer count is needed only to split).
  std::map<std::string, int> stage_of;
  if (target_pp > 1) {
    const int num_layers = state_field<int>(state, "model", "num_layers", reader.iteration_dir());
    check_pipeline_split(num_layers, target_pp, 1);
    for (const std::string& name : reader.names())
      stage_of[name] = pipeline_rank_of_parameter(name, num_layers, target_pp);
  }

  // Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by x TP: the
  // tensors the checkpoint marks as padded vocabularies are re-padded for target_tp.
  const int divisible_by =
      state.value("args", nlohmann::json::object()).value("make_vocab_size_divisible_by", 128);
  auto target_shape = [&](const ShardPlacement& p) {
    Shape shape = p.full_shape;
    if (p.vocab_rows > 0) shape[0] = padded_vocab_size(p.vocab_rows, divisible_by, target_tp);
    return shape;
  };
  for (const std::string& name : reader.names()) {
    const ShardPlacement& p = reader.placement(name);
    if (p.vocab_rows > 0 && state.contains("model") && state["model"].is_object())
      state["model"]["padded_vocab_size"] = target_shape(p)[0];
  }

  CheckpointTransaction transaction(save_dir, it, conversion_nonce());
  for (int pp_rank = 0; pp_rank < target_pp; ++pp_rank) {
    for (int rank = 0; rank < target_tp; ++rank) {
      ParameterStore store(rank, target_tp);
      for (const std::string& name : reader.names()) {
        if (target_pp > 1 && stage_of.at(name) != pp_rank) continue;
        const ShardPlacement& p = reader.placement(name);
        store.add({name, target_shape(p), p.partition_dim, true, p.vocab_rows});
      }
      store.allocate();
      std::map<std::string, Tensor> optimizer;
      for (const std::string& buffer : reader.optimizer_buffer_names())
        optimizer[buffer] = Tensor::zeros({store.flat_values().numel()}, DType::F32);
      read_parameters(reader, store, &optimizer);
      write_checkpoint_rank(transaction.path(), it, store, optimizer, state,
                            {rank, target_tp, pp_rank, target_pp});
    }
  }
  transaction.commit();
}

}  // namespace megatron
