#include "convert/hf_directory.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include "core/durable_file.h"
#include "core/safetensors.h"

namespace fs = std::filesystem;

namespace megatron {
namespace {

nlohmann::json parse_json(const std::string& text, const std::string& path, const char* what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(what, " '", path, "' is not valid JSON: ", e.what());
  }
}

nlohmann::json read_json(const std::string& path, const char* what) {
  return parse_json(read_file(path, what), path, what);
}

void add_file(const std::string& path, std::map<std::string, Tensor>& tensors) {
  SafetensorsReader reader(path);
  for (const std::string& name : reader.names()) {
    MT_REQUIRE(tensors.count(name) == 0, "tensor '", name, "' appears twice (again in '", path,
               "')");
    tensors[name] = reader.get(name);  // the view keeps the mapping alive
  }
}

}  // namespace

HfDirectory read_hf_directory(const std::string& dir) {
  HfDirectory out;
  const std::string config_path = dir + "/config.json";
  out.config_text = read_file(config_path, "HF config file");
  out.config = parse_json(out.config_text, config_path, "HF config file");
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(single)) {
    add_file(single, out.tensors);
  } else {
    MT_REQUIRE(fs::exists(index), "HF model directory '", dir,
               "' has neither model.safetensors nor model.safetensors.index.json (PyTorch .bin "
               "weights are not supported: convert them to safetensors)");
    nlohmann::json j = read_json(index, "HF safetensors index");
    MT_REQUIRE(j.contains("weight_map") && j["weight_map"].is_object(), "HF safetensors index '",
               index, "' has no weight_map object");
    std::set<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) files.insert(file.get<std::string>());
    for (const std::string& file : files) add_file(dir + "/" + file, out.tensors);
  }
  return out;
}

void write_hf_directory(const std::string& dir, const HfDirectory& model, int64_t max_shard_bytes,
                        const std::string& config_text) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  MT_REQUIRE(!ec, "cannot create directory '", dir, "': ", ec.message());
  write_file_durably(dir + "/config.json",
                     config_text.empty() ? model.config.dump(2) + "\n" : config_text);
  std::vector<NamedTensors> shards(1);
  int64_t total = 0, in_shard = 0;
  for (const auto& named : model.tensors) {
    const int64_t bytes = int64_t(named.second.nbytes());
    if (max_shard_bytes > 0 && in_shard > 0 && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(named);
    in_shard += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors(dir + "/model.safetensors", shards[0], {{"format", "pt"}});
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  char name[64];
  for (size_t k = 0; k < shards.size(); ++k) {
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    write_safetensors(dir + "/" + name, shards[k], {{"format", "pt"}});
    for (const auto& [tensor, t] : shards[k]) weight_map[tensor] = name;
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_durably(dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace megatron
