#include "train/convert_common.h"

#include <random>

namespace megatron {

uint64_t conversion_nonce() {
  return (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
}

nlohmann::json imported_checkpoint_state(const nlohmann::json& model_shape, nlohmann::json args,
                                         int make_vocab_size_divisible_by, int target_tp,
                                         const std::string& format, const std::string& hf_dir) {
  args["make_vocab_size_divisible_by"] = make_vocab_size_divisible_by;
  args["tensor_model_parallel_size"] = target_tp;
  return {{"iteration", 0},
          {"consumed_train_samples", 0},
          {"consumed_valid_samples", 0},
          {"model", model_shape},
          {"args", args},
          {"converted_from", {{"format", format}, {"path", hf_dir}}}};
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
