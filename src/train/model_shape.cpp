#include "train/model_shape.h"

namespace megatron {

std::string model_shape_differences(const nlohmann::json& stored, const nlohmann::json& want,
                                    const std::set<std::string>& ignored) {
  std::string differences;
  for (const auto& [key, value] : want.items()) {
    if (!stored.contains(key) || ignored.count(key)) continue;
    if (stored[key] != value)
      differences +=
          "\n  " + key + ": checkpoint " + stored[key].dump() + ", flags " + value.dump();
  }
  return differences;
}

}  // namespace megatron
