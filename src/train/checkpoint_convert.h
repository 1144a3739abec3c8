// Offline checkpoint conversions behind `megatron convert` (one process, no MPI):
// HF GPT-2 -> our checkpoint at any TP size, our checkpoint -> HF GPT-2, and resharding our
// checkpoints to another TP size. Each writes its output atomically, as save_checkpoint does.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "model/gpt_model.h"
#include "train/hf_tokenizer_files.h"

namespace megatron {

// Reads the HF GPT-2 directory `hf_dir` (config.json + safetensors) and saves it to `save_dir`
// as iteration 0 at `target_tp` tensor-parallel ranks, the word embedding padded to Megatron's
// padded vocabulary (multiple of divisible_by × target_tp). No optimizer state; state.json
// holds iteration 0, zero consumed samples, the model shape and the model arguments.
void import_hf_gpt2(const std::string& hf_dir, const std::string& save_dir, int target_tp,
                    int make_vocab_size_divisible_by);

// Gathers iteration `iteration` (-1: latest) of our checkpoint in `load_dir` into full
// tensors and writes an HF GPT-2 directory (config.json + model.safetensors) to `hf_dir`.
// The model shape comes from state.json ("model", "args"); the real vocabulary size from
// `vocab_size` when > 0, else from state.json (model.vocab_size, tokenizer.vocab_size or
// args.vocab_size). Also writes the tokenizer's files (write_hf_tokenizer_files) and a
// generation_config.json (end-of-document token as BOS/EOS).
void export_hf_gpt2(const std::string& load_dir, int64_t iteration, const std::string& hf_dir,
                    int64_t vocab_size, const TokenizerFileOverrides& tokenizer = {});

// Rewrites iteration `iteration` (-1: latest) of `load_dir` at `target_tp` tensor-parallel ×
// `target_pp` pipeline ranks into `save_dir` (same iteration), parameters and optimizer state
// alike, each parameter on the pipeline rank whose contiguous stage holds it
// (pipeline_rank_of_parameter; the number of layers from state.json's model.num_layers);
// state.json of each new rank is the source's rank 0 state with
// args.tensor_model_parallel_size and args.pipeline_model_parallel_size updated.
// Tensors stored as padded vocabularies ("vocab_rows" in their placement) are re-padded to
// Megatron's padded size for `target_tp` (args.make_vocab_size_divisible_by, default 128), as
// a run at that size pads them, and model.padded_vocab_size is updated.
void reshard_checkpoint(const std::string& load_dir, int64_t iteration, const std::string& save_dir,
                        int target_tp, int target_pp = 1);

// The model-shape record the trainer compares on load (state.json "model"), with the
// architecture options (train/architecture_json.h) under their argument names.
nlohmann::json gpt_model_shape_json(const GptConfig& config);
// What an HF config.json says of a GPT model: the shape record plus the norm epsilon, the
// dropouts and the init scale (exported_hf_config_text() compares these).
nlohmann::json gpt_hf_description(const GptConfig& config);
// The training arguments an HF GPT import records: the shape record, sequence length, norm
// epsilon, dropouts and init scale (an export reads them back).
nlohmann::json gpt_imported_args(const GptConfig& config);

}  // namespace megatron
