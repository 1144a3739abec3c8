// Pieces shared by the offline GPT and BERT checkpoint conversions (gpt_checkpoint.cpp,
// bert_checkpoint.cpp): a model's parameter registrations without a communicator, the
// iteration-0 checkpoint an HF import writes, and gathering a checkpoint into full tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "checkpoint/checkpoint.h"
#include "convert/hf_tensor.h"
#include "core/error.h"
#include "distributed/parallel_state.h"
#include "model/stage_range.h"
#include "parallel/full_tensors.h"
#include "parallel/parameter.h"

namespace megatron {

// The parameters ModelT registers for TP rank `rank` of `size` holding pipeline stage `stage`
// (default: the whole model), allocated (zeros), in registration order. The model is built
// only for its registrations: no communicator is needed or used.
template <typename ModelT, typename ConfigT>
ParameterStore registered_parameter_store(const ConfigT& config, int rank, int size,
                                          const StageRange& stage = {}) {
  ParallelState ps;
  ps.tp_rank = rank;
  ps.tp_size = size;
  ps.etp_rank = rank;  // experts split like the dense layers (ParameterStore's default)
  ps.etp_size = size;
  ParameterStore store(rank, size);
  ModelT model(config, ps, store, stage);
  store.allocate();
  return store;
}

// A random nonce for a conversion's CheckpointTransaction (one process, nothing to agree on).
uint64_t conversion_nonce();

// state[section][key] of the checkpoint in `dir`, or an Error naming the missing field.
template <typename T>
T state_field(const nlohmann::json& state, const char* section, const char* key,
              const std::string& dir) {
  MT_REQUIRE(state.contains(section) && state[section].contains(key), "checkpoint '", dir,
             "': state.json has no ", section, ".", key, " (needed to rebuild the model)");
  return state[section][key].get<T>();
}

// state.json of a model imported from the HF directory `hf_dir` (format "hf-gpt2"/"hf-bert"/
// "hf-llama"): iteration 0, nothing consumed, `model_shape` as "model", `args` with the
// vocabulary divisor and target TP size added, and "converted_from" recording the format, the
// path and config.json's bytes (`config_text`, for exported_hf_config_text()).
nlohmann::json imported_checkpoint_state(const nlohmann::json& model_shape, nlohmann::json args,
                                         int make_vocab_size_divisible_by, int target_tp,
                                         const std::string& format, const std::string& hf_dir,
                                         const std::string& config_text);

// The config.json an HF export writes. `regenerated` is the config derived from the checkpoint's
// model; `describe` maps a config.json to what the importer reads from it (the model it
// describes). When the checkpoint was imported (state["converted_from"]["config_json"]) and the
// imported file describes the same model as `regenerated`, that file's bytes are returned
// unchanged — key order, formatting and the keys this program does not read
// (transformers_version, token ids, ...) included — so import → export is byte-identical.
// Otherwise `regenerated` as HF writes it (indented JSON).
std::string exported_hf_config_text(
    const nlohmann::json& state, const nlohmann::json& regenerated,
    const std::function<nlohmann::json(const nlohmann::json&)>& describe);

// Writes the full tensors `full` of ModelT(config) as iteration `iteration` of `save_dir` at
// `target_tp` tensor-parallel ranks, atomically, with the optimizer state `optimizer` (buffer
// name, e.g. "exp_avg" → full tensors of every parameter, as `full`; empty: none).
template <typename ModelT, typename ConfigT>
void write_imported_checkpoint(const std::string& save_dir, const ConfigT& config,
                               const TensorMap& full, const nlohmann::json& state, int target_tp,
                               int64_t iteration = 0,
                               const std::map<std::string, TensorMap>& optimizer = {}) {
  CheckpointTransaction transaction(save_dir, iteration, conversion_nonce());
  for (int rank = 0; rank < target_tp; ++rank) {
    ParameterStore store = registered_parameter_store<ModelT>(config, rank, target_tp);
    assign_from_full_tensors(full, store);
    // Each buffer laid out as the store's flat values: a store of its own filled the same way.
    std::map<std::string, Tensor> buffers;
    for (const auto& [name, tensors] : optimizer) {
      ParameterStore buffer = registered_parameter_store<ModelT>(config, rank, target_tp);
      assign_from_full_tensors(tensors, buffer);
      buffers[name] = buffer.flat_values();
    }
    write_checkpoint_rank(transaction.path(), iteration, store, buffers, state,
                          {rank, target_tp, 0, 1});
  }
  transaction.commit();
}

// Every model tensor of the checkpoint `reader` indexes, gathered to its full shape (f32),
// after checking the checkpoint's shapes are those `expected` (ModelT at TP 1) registers.
TensorMap read_full_model_tensors(const CheckpointShardReader& reader,
                                  const ParameterStore& expected);

}  // namespace megatron
