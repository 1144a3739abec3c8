#include "checkpoint/megatron_lm_torch_dist.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>

#include "checkpoint/checkpoint.h"
#include "checkpoint/layout.h"
#include "checkpoint/megatron_core_keys.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/torch_file.h"

namespace fs = std::filesystem;

namespace megatron {

namespace {

constexpr const char* kConfigFile = "metadata.json";
constexpr const char* kCommonFile = "common.pt";
// The common state's DCP byte item since Megatron-Core stores it in the DCP checkpoint: the
// ShardedObject "common_state" of global shape (1,) at offset (0,).
constexpr const char* kCommonItem = "common_state/shard_0_1";

// The checkpoint's common state: common.pt, else the DCP item (a list of one dict).
PyValue read_common(const std::string& dir, const DcpCheckpoint& dcp) {
  if (fs::exists(dir + "/" + kCommonFile)) return torch_load(dir + "/" + kCommonFile);
  MT_REQUIRE(dcp.byte_items().count(kCommonItem), "Megatron-LM torch_dist checkpoint '", dir,
             "' has neither ", kCommonFile, " nor the DCP item '", kCommonItem,
             "': its common state (args, iteration) is missing");
  const PyValue list = dcp.load_byte_item(kCommonItem);
  const auto& items = list.as_sequence("the DCP item '" + std::string(kCommonItem) + "'");
  MT_REQUIRE(items.size() == 1, "Megatron-LM torch_dist checkpoint '", dir, "': the DCP item '",
             kCommonItem, "' holds ", items.size(), " objects, not one");
  return items[0];
}

bool is_optimizer_key(const std::string& key) {
  static const std::regex pattern(R"((chained_\d+\.)?optimizer\..*)");
  return std::regex_match(key, pattern);
}

}  // namespace

bool is_megatron_lm_torch_dist_dir(const std::string& iteration_dir) {
  return fs::exists(iteration_dir + "/" + kConfigFile) || fs::exists(iteration_dir + "/.metadata");
}

bool is_megatron_lm_torch_dist_checkpoint(const std::string& load_dir) {
  const std::optional<int64_t> iteration = read_latest_iteration(load_dir);
  return iteration &&
         is_megatron_lm_torch_dist_dir(load_dir + "/" + iteration_dir_name(*iteration));
}

const PyValue& MegatronLmTorchDist::args() const {
  const PyValue* a = common.as_dict("").find("args");
  MT_CHECK(a, "read_megatron_lm_torch_dist checked the args");
  return *a;
}

MegatronLmTorchDist read_megatron_lm_torch_dist(const std::string& load_dir, int64_t iteration) {
  const std::string dir = checkpoint_iteration_dir(load_dir, iteration);
  const std::string config_path = dir + "/" + kConfigFile;
  MT_REQUIRE(fs::exists(config_path), "Megatron-LM checkpoint '", dir, "' has no ", kConfigFile,
             ", so it is not a complete torch_dist checkpoint (Megatron-Core writes it last)");
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(read_file(config_path, "Megatron-Core checkpoint config"));
  } catch (const nlohmann::json::exception& e) {
    MT_THROW("'", config_path, "' is not valid JSON: ", e.what());
  }
  const std::string backend = config.is_object() ? config.value("sharded_backend", "") : "";
  MT_REQUIRE(backend == "torch_dist", "'", config_path, "' names the sharded backend '", backend,
             "'; megatron-cpp reads Megatron-LM's torch_dist checkpoints (and torch, "
             "mp_rank_*/model_optim_rng.pt): save it with --ckpt-format torch_dist or torch");
  MegatronLmTorchDist ckpt{dir, 0, 0, PyValue(), DcpCheckpoint(dir)};
  ckpt.common = read_common(dir, ckpt.dcp);
  const std::string where = "the common state of Megatron-LM checkpoint '" + dir + "'";
  const PyDict& common = ckpt.common.as_dict(where);
  const PyValue* args = common.find("args");
  MT_REQUIRE(args && args->kind() == PyValue::Kind::kDict, where,
             " has no \"args\" (a checkpoint saved without them cannot be rebuilt)");
  const PyValue* it = common.find("iteration");
  MT_REQUIRE(it, where, " has no \"iteration\"");
  ckpt.iteration = it->as_int("\"iteration\" of " + where);
  const PyValue* version = common.find("checkpoint_version");
  ckpt.checkpoint_version = version ? version->as_float("\"checkpoint_version\" of " + where) : 0;
  MT_REQUIRE(ckpt.checkpoint_version >= 2 && ckpt.checkpoint_version <= 3, where,
             " has checkpoint_version ", ckpt.checkpoint_version,
             "; torch_dist checkpoints of versions 2 and 3 are known");
  return ckpt;
}

MegatronLmTorchDistModel megatron_lm_torch_dist_tensors(const MegatronLmTorchDist& ckpt,
                                                        int64_t num_layers, bool tied_embeddings) {
  MegatronLmTorchDistModel out;
  const std::string& dir = ckpt.iteration_dir;
  for (const auto& [key, item] : ckpt.dcp.byte_items()) {
    (void)item;
    if (key != kCommonItem && key.find("._extra_state/") == std::string::npos)
      out.not_converted.push_back(key);
  }
  // Megatron-Core's optimizer tensors of a parameter replace the model's ShardedTensor key by
  // "optimizer.state.<state>.<model key>" and keep its global shape (MixedPrecisionOptimizer's
  // and FP32Optimizer's sharded_state_dict); the distributed optimizer's flattened layouts
  // (fully_sharded_model_space: [X/x, Y/y, x·y]) do not.
  // The distributed optimizer's fully_reshardable layout (sharded_param_state_fully_reshardable)
  // is the same with the fp32 main params under the state key "param".
  static const std::regex optimizer_pattern(
      R"(optimizer\.state\.(exp_avg|exp_avg_sq|fp32_param|param)\.(.+))");
  std::map<std::string, Shape> model_shapes;
  for (const auto& [key, t] : ckpt.dcp.tensors())
    if (!is_optimizer_key(key)) model_shapes[key] = t.shape;
  for (const auto& [key, t] : ckpt.dcp.tensors()) {
    std::map<std::string, Tensor>* sink = &out.tensors;
    std::string model_key = key;
    if (is_optimizer_key(key)) {
      std::smatch m;
      if (!std::regex_match(key, m, optimizer_pattern)) {
        out.not_converted.push_back(key);
        continue;
      }
      model_key = m[2];
      const auto shape = model_shapes.find(model_key);
      MT_REQUIRE(shape != model_shapes.end() && shape->second == t.shape,
                 "Megatron-LM checkpoint '", dir, "' holds the optimizer tensor '", key, "' ",
                 shape_str(t.shape),
                 shape == model_shapes.end()
                     ? std::string(" of no model tensor")
                     : ", not of its parameter's shape " + shape_str(shape->second),
                 ": only the non-distributed optimizer's state is read (the distributed "
                 "optimizer's flattened layouts are not); load it in Megatron-LM without "
                 "--use-distributed-optimizer and save again, or start from the weights with "
                 "--finetune");
      const std::string state = m[1];
      sink = &out.optimizer[state == "fp32_param" || state == "param" ? "fp32_master" : state];
    }
    const std::optional<MegatronCppName> target = megatron_cpp_name(model_key);
    MT_REQUIRE(target, "Megatron-LM checkpoint '", dir, "' holds '", key, "' ", shape_str(t.shape),
               ", which no GPT-family model of megatron-cpp has (BERT and multi-latent "
               "attention checkpoints are not read yet)");
    // Tied: output_layer.weight is the embedding's copy.
    if (tied_embeddings && target->name == "output_layer.weight") continue;
    auto add = [&](const std::string& name, Tensor value) {
      MT_REQUIRE(!sink->count(name), "Megatron-LM checkpoint '", dir, "' holds ", name,
                 " twice (the second time as '", key, "')");
      (*sink)[name] = std::move(value);
    };
    const Tensor global = ckpt.dcp.read_tensor(key);
    if (!target->stacked) {
      add(target->name, global);
      continue;
    }
    MT_REQUIRE(!t.shape.empty() && t.shape[0] == num_layers, "Megatron-LM checkpoint '", dir,
               "': '", key, "' is ", shape_str(t.shape), ", whose first axis should be its ",
               num_layers, " layers (args.num_layers)");
    for (int64_t i = 0; i < num_layers; ++i)
      add("layers." + std::to_string(i) + "." + target->name,
          global.slice(0, i, i + 1).view(Shape(t.shape.begin() + 1, t.shape.end())));
  }
  return out;
}

}  // namespace megatron
