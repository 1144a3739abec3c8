// The Llama-family architecture options (model/transformer_config.h) as a checkpoint's stored
// arguments record them: Megatron attribute names of pretrain-gpt's flags
// ("position_embedding_type": "rope", "num_query_groups": 2, ...). convert and generate
// rebuild a model from them; a checkpoint without them (GPT-2) gets the defaults.
#pragma once

#include <nlohmann/json.hpp>

#include "model/transformer_config.h"

namespace megatron {

// Throws Error naming an unknown value.
ArchitectureOptions architecture_from_args_json(const nlohmann::json& args);
// The entries to store (the inverse).
nlohmann::json architecture_args_json(const ArchitectureOptions& options);
// The GeLU form a stored record ("args", or a model-shape record) keeps under Megatron's
// "openai_gelu": true is the tanh form. A record without it predates the erf form here, when
// every model computed tanh, so it reads as tanh.
kernels::GeluForm gelu_form_from_args_json(const nlohmann::json& record);
// {"openai_gelu": ...}, the entry to store (the inverse).
nlohmann::json gelu_args_json(kernels::GeluForm form);
// The norms' epsilon: "norm_epsilon" when stored, else "layernorm_epsilon", else 1e-5.
float norm_epsilon_from_args_json(const nlohmann::json& args);

}  // namespace megatron
