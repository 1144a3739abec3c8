#include "checkpoint/pretrained_load.h"

#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/logging.h"
#include "distributed/broadcast_bytes.h"

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
  report.from = reader.iteration_dir();
  for (const Parameter& p : params.params())
    if (fresh(p.spec.name)) report.fresh.push_back(p.spec.name);
  for (const std::string& name : reader.names())
    if (!params.contains(name)) report.unused.push_back(name);
  return report;
}

PretrainedLoadReport merge_stage_reports(const PretrainedLoadReport& stage,
                                         Communicator& pipeline) {
  PretrainedLoadReport all;
  all.from = stage.from;
  const std::string mine = nlohmann::json{{"fresh", stage.fresh}, {"unused", stage.unused}}.dump();
  std::map<std::string, int> unused_by;  // name -> stages that did not read it
  for (int root = 0; root < pipeline.size(); ++root) {
    const nlohmann::json theirs = nlohmann::json::parse(broadcast_string(pipeline, mine, root));
    for (const std::string& name : theirs.at("fresh").get<std::vector<std::string>>())
      all.fresh.push_back(name);
    for (const std::string& name : theirs.at("unused").get<std::vector<std::string>>())
      ++unused_by[name];
  }
  // Unused by every stage, hence in this stage's list too: its (the checkpoint's) order.
  for (const std::string& name : stage.unused)
    if (unused_by[name] == pipeline.size()) all.unused.push_back(name);
  return all;
}

void log_pretrained_load(const PretrainedLoadReport& report) {
  auto joined = [](const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? std::string("none") : out;
  };
  log_info("loaded pretrained weights from ", report.from,
           "; left to their initialisation: ", joined(report.fresh),
           "; in the checkpoint but not in the model (not loaded): ", joined(report.unused));
}

}  // namespace megatron
