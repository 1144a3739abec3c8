// Offline checkpoint conversions behind `megatron convert` (one process, no MPI):
// HF GPT-2 -> our checkpoint at any TP size, our checkpoint -> HF GPT-2, and resharding our
// checkpoints to another TP × PP size (optionally as the distributed optimizer's DP shards). Each
// writes its output atomically, as save_checkpoint does.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "convert/hf_tokenizer_files.h"
#include "model/gpt_model.h"
#include "model/stage_range.h"
#include "parallel/parameter.h"

namespace megatron {

// Reads the HF GPT-2 directory `hf_dir` (config.json + safetensors) and saves it to `save_dir`
// as iteration 0 at `target_tp` tensor-parallel ranks, the word embedding padded to Megatron's
// padded vocabulary (multiple of divisible_by × target_tp). No optimizer state; state.json
// holds iteration 0, zero consumed samples, the model shape and the model arguments.
void import_hf_gpt2(const std::string& hf_dir, const std::string& save_dir, int target_tp,
                    int make_vocab_size_divisible_by);

// Gathers iteration `iteration` (-1: latest) of our checkpoint in `load_dir` into full
// tensors and writes an HF GPT-2 directory (config.json + model.safetensors) to `hf_dir`.
// The model is gpt_config_from_checkpoint_state(state.json, `vocab_size`). Also writes the
// tokenizer's files (write_hf_tokenizer_files), a generation_config.json (end-of-document token
// as BOS/EOS) and the model card README.md (convert/hf_model_card.h).
void export_hf_gpt2(const std::string& load_dir, int64_t iteration, const std::string& hf_dir,
                    int64_t vocab_size, const TokenizerFileOverrides& tokenizer = {});

// The parameters one rank of a training run registers, allocated (zeros), in the order its
// model registers them: that order is the rank's flat space, which the distributed optimizer's
// DP shards cut (DpShard::of). `state` is the target's state.json (model shape and args,
// model.padded_vocab_size already padded for `tp_size`), read from the checkpoint `dir` (for
// the messages).
using RankParameters =
    std::function<ParameterStore(const nlohmann::json& state, const std::string& dir, int tp_rank,
                                 int tp_size, const StageRange& stage)>;

// How reshard_checkpoint writes the optimizer state: whole buffers (optimizer.safetensors per
// rank; dp_size 0), or as the dp_size data-parallel ranks of a --use-distributed-optimizer run
// at the target layout save it (dp_size >= 1; > 1: optimizer_dpRRR_of_DDD.safetensors per DP
// rank, each DpShard::of the flat space laid out by `registered`).
struct DistributedOptimizerTarget {
  int dp_size = 0;
  RankParameters registered;
};

// Rewrites iteration `iteration` (-1: latest) of `load_dir` at `target_tp` tensor-parallel ×
// `target_pp` pipeline ranks into `save_dir` (same iteration), parameters and optimizer state
// alike, each parameter on the pipeline rank whose contiguous stage holds it
// (pipeline_rank_of_parameter; the number of layers from state.json's model.num_layers);
// state.json of each new rank is the source's rank 0 state with
// args.tensor_model_parallel_size, args.pipeline_model_parallel_size and, with `distributed`,
// args.use_distributed_optimizer updated, and the pipeline split's args (virtual stages,
// first/last counts, account-for flags, micro-batch group) reset: the target's stages are even.
// Tensors stored as padded vocabularies ("vocab_rows" in their placement) are re-padded to
// Megatron's padded size for `target_tp` (args.make_vocab_size_divisible_by, default 128), as
// a run at that size pads them, and model.padded_vocab_size is updated.
// With `distributed`.dp_size > 1 the checkpoint's optimizer state is written as the
// distributed optimizer's shards (write_optimizer_shard, the trainer's writer), so the files
// are those a run at that layout saves; a checkpoint without optimizer state, or whose
// parameters are not those `distributed.registered` registers, is an Error.
void reshard_checkpoint(const std::string& load_dir, int64_t iteration, const std::string& save_dir,
                        int target_tp, int target_pp = 1,
                        const DistributedOptimizerTarget& distributed = {});

// RankParameters of GPT-family models (GPT-2, Llama, Mistral, Qwen2: GptModel), shape and
// architecture from the state's "model" and "args" (gpt_config_from_checkpoint_state).
ParameterStore gpt_rank_parameters(const nlohmann::json& state, const std::string& dir, int tp_rank,
                                   int tp_size, const StageRange& stage);

// The GptConfig whose parameters a GPT-family checkpoint holds, from its state.json: the shape
// from "model"; the architecture, GeLU form, norm epsilon, dropouts and init scale from "args"
// (GptConfig's defaults where unrecorded); the real vocabulary size `vocab_size` when > 0, else
// the first of model.vocab_size, tokenizer.vocab_size, args.vocab_size. Throws Error naming
// `dir` and a missing shape field, or a real vocabulary unknown or above the padded one.
GptConfig gpt_config_from_checkpoint_state(const nlohmann::json& state, const std::string& dir,
                                           int64_t vocab_size = 0);
// Warns that an export to `format` (HF, GGUF) leaves out the multi-token-prediction depths
// (mtp.*, a training-only head those formats have no place for) when `config` has them.
void warn_mtp_not_exported(const GptConfig& config, const std::string& format);
// What an HF config.json says of a GPT model: the shape record plus the norm epsilon, the
// dropouts and the init scale (exported_hf_config_text() compares these).
nlohmann::json gpt_hf_description(const GptConfig& config);
// The training arguments an HF GPT import records: the shape record, sequence length, norm
// epsilon, dropouts and init scale (an export reads them back).
nlohmann::json gpt_imported_args(const GptConfig& config);

}  // namespace megatron
