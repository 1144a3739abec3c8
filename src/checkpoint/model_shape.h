// A model's shape record (state.json "model": the arguments that decide which function the
// weights compute), one per model family, and comparing it (ModelStep::shape_json) with the
// one a checkpoint recorded. Comparing a model's shape arguments (ModelStep::shape_json) with those
// a checkpoint recorded in its state.json "model": a different head count, LayerNorm order or
// epsilon loads without a tensor-shape error but computes another function.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "model/bert_config.h"
#include "model/gpt_model.h"

namespace megatron {

// One line "\n  key: checkpoint X, flags Y" per key of `want` that `stored` records with
// another value, except the keys in `ignored`; "" when they agree. Keys `stored` lacks (an
// older or imported checkpoint's) cannot be compared and are skipped. A head size
// ("kv_channels") equal to hidden / heads is the same as 0 (implied) on either side.
std::string model_shape_differences(const nlohmann::json& stored, const nlohmann::json& want,
                                    const std::set<std::string>& ignored);

// GPT and Llama-family decoders: the transformer's shape, the architecture options (some
// change no parameter shape: RoPE vs no positions, the RoPE base) and the GeLU form.
nlohmann::json gpt_model_shape_json(const GptConfig& config);
// BERT: the transformer's shape, token types, LayerNorm order and epsilon, the binary head.
nlohmann::json bert_model_shape_json(const BertConfig& config);

}  // namespace megatron
