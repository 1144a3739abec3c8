// The model card of an HF export: README.md beside config.json, as the HuggingFace Hub shows
// it — what the model is (class, shape, parameters), how it came to be (the iterations, data,
// tokens seen, tokenizer, optimizer settings and parallel layout that the checkpoint's
// state.json records) and how to load it. Only what the checkpoint and the exported files
// record is written: a fact the checkpoint does not hold (say, the data of an imported model)
// is left out or said to be unknown, never guessed.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace megatron {

// The card's text. `state`: the exported checkpoint's state.json (iteration,
// consumed_train_samples, model, args, tokenizer, converted_from); `hf_config`: the exported
// config.json; `parameters`: the elements of the exported tensors; `checkpoint_dir` and
// `hf_dir`: where it came from and where it is (for the loading example).
std::string hf_model_card(const nlohmann::json& state, const nlohmann::json& hf_config,
                          int64_t parameters, const std::string& checkpoint_dir,
                          const std::string& hf_dir);

// Writes `hf_dir`/README.md for the export just written there (its config.json and weights are
// read back for the class and the parameter count).
void write_hf_model_card(const std::string& hf_dir, const nlohmann::json& state,
                         const std::string& checkpoint_dir);

}  // namespace megatron
