// A HuggingFace model directory on disk: config.json plus the weights, either one
// model.safetensors or shards listed by model.safetensors.index.json ("weight_map").
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "core/tensor.h"

namespace megatron {

struct HfDirectory {
  nlohmann::json config;                  // config.json
  std::map<std::string, Tensor> tensors;  // as stored (views of the mapped files)
  std::string config_text;                // config.json's bytes, as read (an import records them)
};

// Throws Error naming the file when config.json or the weights are missing or malformed.
HfDirectory read_hf_directory(const std::string& dir);
// Creates `dir` if needed and writes config.json (`config_text` verbatim when given — an export
// reproducing the imported file, exported_hf_config_text() — else `config` as indented JSON) and
// model.safetensors ({"format": "pt"}) — or, when max_shard_bytes > 0 and the tensors exceed it,
// HF's sharded layout: the tensors in name order cut into model-0000k-of-0000n.safetensors files of
// at most max_shard_bytes each (a larger tensor gets a file of its own) and
// model.safetensors.index.json with
// {"metadata": {"total_size"}, "weight_map": {name: file}}.
void write_hf_directory(const std::string& dir, const HfDirectory& model,
                        int64_t max_shard_bytes = 0, const std::string& config_text = "");

// config.json's `key` as a T; throws Error naming the model ("HF Llama") when it is absent,
// null or of another type.
template <typename T>
T required_config_field(const nlohmann::json& config, const char* key, const char* model_name) {
  MT_REQUIRE(config.contains(key) && !config[key].is_null(), model_name, " config.json has no '",
             key, "'");
  try {
    return config[key].get<T>();
  } catch (const nlohmann::json::exception&) {
    MT_THROW(model_name, " config.json: '", key, "' = ", config[key].dump(), " has the wrong type");
  }
}

}  // namespace megatron
