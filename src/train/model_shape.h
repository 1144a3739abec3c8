// Comparing a model's shape arguments (ModelStep::shape_json) with those a checkpoint recorded
// in its state.json "model": a different head count, LayerNorm order or epsilon loads without
// a tensor-shape error but computes another function.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace megatron {

// One line "\n  key: checkpoint X, flags Y" per key of `want` that `stored` records with
// another value, except the keys in `ignored`; "" when they agree. Keys `stored` lacks (an
// older or imported checkpoint's) cannot be compared and are skipped.
std::string model_shape_differences(const nlohmann::json& stored, const nlohmann::json& want,
                                    const std::set<std::string>& ignored);

}  // namespace megatron
