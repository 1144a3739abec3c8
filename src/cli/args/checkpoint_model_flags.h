// The model flags of Megatron's parser (--hidden-size, --swiglu, --normalization, ...) on a
// command whose model is a checkpoint's: `megatron generate`, like Megatron's inference scripts,
// is given a training script's model flags, but builds the model from the checkpoint's stored
// arguments. Without --use-checkpoint-args a model flag must agree with the checkpoint (Megatron
// would build the model from the flag and fail to load the checkpoint); with it, the
// checkpoint's value replaces the flag's (Megatron's load_args_from_checkpoint).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/language_model_config.h"

namespace megatron::cli {

// Whether `flag` describes the model's shape or architecture.
bool is_model_flag(std::string_view flag);

// A model flag as given on the command line: its values (empty for a switch).
struct GivenModelFlag {
  std::string flag;
  std::vector<std::string> values;
};

// The flags of `given` whose value differs from the model `config` (as built from the checkpoint
// `load`), each as one sentence: "--hidden-size 1152 differs from the checkpoint's 128".
// Numbers compare as numbers ("0.5" equals 0.5f), a switch given means true.
std::vector<std::string> model_flag_mismatches(const std::vector<GivenModelFlag>& given,
                                               const LanguageModelConfig& config);

}  // namespace megatron::cli
