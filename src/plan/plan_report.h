// The planner's output: one plan (memory per rank, time per iteration and its parts,
// throughput) or a ranked search, as text for people and as JSON for scripts (--json).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "plan/layout_search.h"

namespace megatron::plan {

struct Plan {
  ModelSpec model;
  Layout layout;
  Implementation impl = Implementation::kMegatronCpp;
  Machine machine;
  MemoryEstimate memory;
  StepTime time;
  double headroom = 0;  // fraction of device memory to keep free (--memory-headroom)
  bool fits() const { return memory.peak() <= machine.memory_bytes * (1.0 - headroom); }
};

// Validates and predicts one layout.
Plan make_plan(const ModelSpec& model, const Layout& layout, const Machine& machine,
               Implementation impl, double headroom = 0.0);

std::string format_plan(const Plan& plan);
nlohmann::json plan_to_json(const Plan& plan);

std::string format_search(const ModelSpec& model, const Machine& machine, Implementation impl,
                          int devices, const SearchResult& result, double headroom = 0.0);
nlohmann::json search_to_json(const ModelSpec& model, const Machine& machine, Implementation impl,
                              int devices, const SearchResult& result);

}  // namespace megatron::plan
