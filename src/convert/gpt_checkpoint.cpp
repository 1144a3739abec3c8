#include "convert/gpt_checkpoint.h"

#include <set>

#include "checkpoint/architecture_json.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/model_shape.h"
#include "convert/convert_common.h"
#include "convert/hf_directory.h"
#include "convert/hf_gpt2.h"
#include "convert/hf_model_card.h"
#include "core/durable_file.h"
#include "core/logging.h"
#include "model/stage_range.h"
#include "optim/distributed_optimizer.h"

namespace megatron {

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

void warn_mtp_not_exported(const GptConfig& config, const std::string& format) {
  if (config.arch.mtp.enabled())
    log_warning(detail::concat("the ", config.arch.mtp.num_layers,
                               " multi-token-prediction depths (mtp.*, --mtp-num-layers) are not "
                               "exported: ",
                               format, " has no place for them (generation does not use them)"));
}

void export_hf_gpt2(const std::string& load_dir, int64_t iteration, const std::string& hf_dir,
                    int64_t vocab_size, const TokenizerFileOverrides& tokenizer_files) {
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  const nlohmann::json state = reader.state(0, 0);
  const std::string& dir = reader.iteration_dir();
  const GptConfig c = gpt_config_from_checkpoint_state(state, dir, vocab_size);
  const nlohmann::json tokenizer = checkpoint_tokenizer(state);

  nlohmann::json config = hf_config_from_gpt(c);  // rejects what GPT-2 cannot describe
  warn_mtp_not_exported(c, "HF GPT-2");
  const TensorMap full =
      read_full_model_tensors(reader, registered_parameter_store<GptModel>(c, 0, 1));
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
  write_hf_model_card(hf_dir, state, dir);
}

GptConfig gpt_config_from_checkpoint_state(const nlohmann::json& state, const std::string& dir,
                                           int64_t vocab_size) {
  const nlohmann::json args = state.value("args", nlohmann::json::object());
  GptConfig c;
  c.num_layers = state_field<int>(state, "model", "num_layers", dir);
  c.hidden_size = state_field<int>(state, "model", "hidden_size", dir);
  c.num_attention_heads = state_field<int>(state, "model", "num_attention_heads", dir);
  c.ffn_hidden_size = state_field<int>(state, "model", "ffn_hidden_size", dir);
  c.max_position_embeddings = state_field<int>(state, "model", "max_position_embeddings", dir);
  c.padded_vocab_size = state_field<int64_t>(state, "model", "padded_vocab_size", dir);
  c.seq_length = c.max_position_embeddings;
  c.layernorm_epsilon = norm_epsilon_from_args_json(args);
  // Unrecorded dropouts and init scale are the trainer's defaults (GptConfig's), which the run
  // that wrote no record used.
  c.attention_dropout = args.value("attention_dropout", c.attention_dropout);
  c.hidden_dropout = args.value("hidden_dropout", c.hidden_dropout);
  c.init_method_std = args.value("init_method_std", c.init_method_std);
  c.arch = architecture_from_args_json(args);
  c.gelu = gelu_form_from_args_json(args);
  const nlohmann::json tokenizer = checkpoint_tokenizer(state);
  c.vocab_size = vocab_size > 0 ? vocab_size
                 : state["model"].contains("vocab_size")
                     ? state["model"]["vocab_size"].get<int64_t>()
                 : tokenizer.is_object() && tokenizer.contains("vocab_size")
                     ? tokenizer["vocab_size"].get<int64_t>()
                     : args.value("vocab_size", int64_t(0));
  MT_REQUIRE(c.vocab_size > 0 && c.vocab_size <= c.padded_vocab_size, "checkpoint '", dir,
             "': the real vocabulary size is unknown (no model.vocab_size, tokenizer.vocab_size "
             "or args.vocab_size in state.json) or larger than the padded ",
             c.padded_vocab_size, " (got ", c.vocab_size,
             "); pass it with --vocab-size (megatron convert --to hf)");
  return c;
}

ParameterStore gpt_rank_parameters(const nlohmann::json& state, const std::string& dir, int tp_rank,
                                   int tp_size, const StageRange& stage) {
  return registered_parameter_store<GptModel>(gpt_config_from_checkpoint_state(state, dir), tp_rank,
                                              tp_size, stage);
}

void reshard_checkpoint(const std::string& load_dir, int64_t iteration, const std::string& save_dir,
                        int target_tp, int target_pp,
                        const DistributedOptimizerTarget& distributed) {
  MT_CHECK(target_tp >= 1, "--target-tensor-parallel-size must be >= 1, got ", target_tp);
  const int target_dp = distributed.dp_size;
  MT_CHECK(target_dp >= 0, "reshard_checkpoint: data-parallel size ", target_dp);
  const bool sharded = target_dp > 1;
  MT_CHECK(!sharded || distributed.registered,
           "reshard_checkpoint: distributed-optimizer shards need the model's registrations");
  const int64_t it = resolve_checkpoint_iteration(load_dir, iteration);
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, it));
  MT_REQUIRE(!sharded || !reader.optimizer_buffer_names().empty(), "checkpoint '",
             reader.iteration_dir(),
             "' holds no optimizer state (saved with --no-save-optim, or imported): there are "
             "no distributed-optimizer shards to write; convert without "
             "--use-distributed-optimizer");
  nlohmann::json state = reader.state(0, 0);
  if (state.contains("args") && state["args"].is_object()) {
    state["args"]["tensor_model_parallel_size"] = target_tp;
    state["args"]["pipeline_model_parallel_size"] = target_pp;
    if (target_dp > 0) state["args"]["use_distributed_optimizer"] = true;
    // The target's stages are even, without virtual stages: the source's split flags no
    // longer describe it.
    nlohmann::json& args = state["args"];
    for (const char* key :
         {"num_layers_per_virtual_pipeline_stage", "num_virtual_stages_per_pipeline_rank",
          "decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
          "microbatch_group_size_per_virtual_pipeline_stage"})
      if (args.contains(key)) args[key] = nullptr;
    for (const char* key :
         {"account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split"})
      if (args.contains(key)) args[key] = false;
    if (args.contains("pipeline_model_parallel_layout"))
      args["pipeline_model_parallel_layout"] = "";
  }
  // Which pipeline rank writes each tensor (the layer count is needed only to split).
  std::map<std::string, int> stage_of;
  PipelineSplit split{.pipeline_size = target_pp};
  if (target_pp > 1) {
    split.num_layers = state_field<int>(state, "model", "num_layers", reader.iteration_dir());
    check_pipeline_split(split);
    for (const std::string& name : reader.names())
      stage_of[name] = pipeline_rank_of_parameter(name, split);
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

  // The parameters of one target rank. Whole buffers are written per parameter, so any order
  // serves; the distributed optimizer's shards cut the flat space, so there it is the model's
  // (the last stage's copy of a tied embedding included: it is in the flat space, not saved).
  std::set<std::string> registered;  // by the target ranks' models (sharded)
  auto rank_parameters = [&](int rank, int pp_rank) {
    if (sharded) {
      const StageRange stage = target_pp > 1 ? stage_range(split, pp_rank, 0) : StageRange{};
      ParameterStore store =
          distributed.registered(state, reader.iteration_dir(), rank, target_tp, stage);
      check_checkpoint_matches(reader, store, target_pp == 1);
      for (const Parameter& p : store.params()) registered.insert(p.spec.name);
      return store;
    }
    ParameterStore store(rank, target_tp);
    for (const std::string& name : reader.names()) {
      if (target_pp > 1 && stage_of.at(name) != pp_rank) continue;
      const ShardPlacement& p = reader.placement(name);
      store.add({name, target_shape(p), p.partition_dim, true, p.vocab_rows});
    }
    store.allocate();
    return store;
  };

  CheckpointTransaction transaction(save_dir, it, conversion_nonce());
  for (int pp_rank = 0; pp_rank < target_pp; ++pp_rank) {
    for (int rank = 0; rank < target_tp; ++rank) {
      ParameterStore store = rank_parameters(rank, pp_rank);
      const int64_t total = store.flat_values().numel();
      std::map<std::string, Tensor> optimizer;
      for (const std::string& buffer : reader.optimizer_buffer_names())
        optimizer[buffer] = Tensor::zeros({total}, DType::F32);
      read_parameters(reader, store, &optimizer);
      const RankCoordinates coords{rank, target_tp, pp_rank, target_pp};
      if (!sharded) {
        write_checkpoint_rank(transaction.path(), it, store, optimizer, state, coords);
        continue;
      }
      // As save_checkpoint with an OptimizerShard: DP rank 0 writes the model and the state,
      // every DP rank d its shard of the optimizer state.
      write_checkpoint_rank(transaction.path(), it, store, {}, state, coords);
      const std::string rank_dir =
          transaction.path() + "/" + rank_dir_name(rank, pp_rank, target_pp);
      for (int dp_rank = 0; dp_rank < target_dp; ++dp_rank) {
        const DpShard shard = DpShard::of(total, target_dp, dp_rank);
        std::map<std::string, Tensor> shard_buffers;
        for (const auto& [buffer, flat] : optimizer)
          shard_buffers[buffer] = flat.slice(0, shard.range.begin, shard.range.end);
        write_optimizer_shard(rank_dir, it, store, shard_buffers, {shard.range, dp_rank, target_dp},
                              coords);
      }
      fsync_directory(transaction.path());
    }
  }
  // A stage does not report the checkpoint's parameters it does not hold; none may be left out.
  std::string unregistered;
  for (const std::string& name : reader.names())
    if (sharded && !registered.count(name)) unregistered += "\n  " + name;
  MT_REQUIRE(unregistered.empty(), "checkpoint '", reader.iteration_dir(),
             "' holds parameters that no pipeline stage of the model its state.json describes "
             "registers:",
             unregistered);
  transaction.commit();
}

}  // namespace megatron
