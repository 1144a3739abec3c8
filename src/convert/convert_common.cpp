#include "convert/convert_common.h"

#include <random>

#include "core/logging.h"

namespace megatron {

uint64_t conversion_nonce() {
  return (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
}

nlohmann::json imported_checkpoint_state(const nlohmann::json& model_shape, nlohmann::json args,
                                         int make_vocab_size_divisible_by, int target_tp,
                                         const std::string& format, const std::string& hf_dir,
                                         const std::string& config_text) {
  args["make_vocab_size_divisible_by"] = make_vocab_size_divisible_by;
  args["tensor_model_parallel_size"] = target_tp;
  return {{"iteration", 0},
          {"consumed_train_samples", 0},
          {"consumed_valid_samples", 0},
          {"model", model_shape},
          {"args", args},
          {"converted_from", {{"format", format}, {"path", hf_dir}, {"config_json", config_text}}}};
}

std::string exported_hf_config_text(
    const nlohmann::json& state, const nlohmann::json& regenerated,
    const std::function<nlohmann::json(const nlohmann::json&)>& describe) {
  const std::string regenerated_text = regenerated.dump(2) + "\n";
  if (!state.contains("converted_from") || !state["converted_from"].contains("config_json"))
    return regenerated_text;
  const std::string& original =
      state["converted_from"]["config_json"].get_ref<const std::string&>();
  nlohmann::json parsed = nlohmann::json::parse(original, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return regenerated_text;
  std::string differences;
  try {
    const nlohmann::json was = describe(parsed), now = describe(regenerated);
    if (was == now) return original;
    for (const auto& [key, value] : now.items())
      if (!was.contains(key) || was[key] != value)
        differences += " " + key + " " + (was.contains(key) ? was[key].dump() : "(absent)") +
                       " -> " + value.dump() + ";";
  } catch (const Error& e) {
    differences = std::string(" the recorded file no longer imports: ") + e.what();
  }
  log_warning(
      "the checkpoint's model is not the one of the HF config.json it was imported "
      "from (" +
      differences + " ): writing a regenerated config.json");
  return regenerated_text;
}

TensorMap read_full_model_tensors(const CheckpointShardReader& reader,
                                  const ParameterStore& expected) {
  // The checkpoint's shapes must be this model's (e.g. heads cannot be read off the shapes).
  check_checkpoint_matches(reader, expected, true);
  TensorMap full;
  for (const std::string& name : reader.names()) {
    Tensor t = Tensor::empty(reader.placement(name).full_shape, DType::F32);
    reader.read_model(name, t, -1, 0);
    full[name] = t;
  }
  return full;
}

}  // namespace megatron
