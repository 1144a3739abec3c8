#include "train/pretrained_load.h"

#include "core/error.h"
#include "core/logging.h"
#include "train/checkpoint.h"

namespace megatron {

PretrainedLoadReport load_pretrained(const std::string& load_dir, int64_t iteration,
                                     ParameterStore& params,
                                     const std::vector<std::string>& fresh_prefixes) {
  const ParameterFilter fresh = [&](const std::string& name) {
    for (const std::string& prefix : fresh_prefixes)
      if (name.starts_with(prefix)) return true;
    return false;
  };
  for (const std::string& prefix : fresh_prefixes) {
    bool matched = false;
    for (const Parameter& p : params.params()) matched = matched || p.spec.name.starts_with(prefix);
    MT_CHECK(matched, "fresh parameter prefix '", prefix, "' matches no parameter of the model");
  }
  CheckpointShardReader reader(checkpoint_iteration_dir(load_dir, iteration));
  check_checkpoint_matches(reader, params, /*model_is_complete=*/false, fresh);
  read_parameters(reader, params, nullptr, fresh);

  PretrainedLoadReport report;
  for (const Parameter& p : params.params())
    if (fresh(p.spec.name)) report.fresh.push_back(p.spec.name);
  for (const std::string& name : reader.names())
    if (!params.contains(name)) report.unused.push_back(name);
  auto joined = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? std::string("none") : out;
  };
  log_info("loaded pretrained weights from ", reader.iteration_dir(),
           "; left to their initialisation: ", joined(report.fresh),
           "; in the checkpoint but not in the model (not loaded): ", joined(report.unused));
  return report;
}

}  // namespace megatron
