// A HuggingFace model directory on disk: config.json plus the weights, either one
// model.safetensors or shards listed by model.safetensors.index.json ("weight_map").
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/tensor.h"

namespace megatron {

struct HfDirectory {
  nlohmann::json config;                  // config.json
  std::map<std::string, Tensor> tensors;  // as stored (views of the mapped files)
};

// Throws Error naming the file when config.json or the weights are missing or malformed.
HfDirectory read_hf_directory(const std::string& dir);
// Creates `dir` if needed and writes config.json and model.safetensors ({"format": "pt"}).
void write_hf_directory(const std::string& dir, const HfDirectory& model);

}  // namespace megatron
