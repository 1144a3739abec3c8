// AdamW over the ParameterStore's flat buffers: the store's f32 values are the master
// weights, and the two Adam moments live in flat f32 buffers of the same layout (one element
// per local parameter element), exposed by name for checkpointing.
//
// Weight decay is decoupled (AdamW) and applied only to parameters whose ParamSpec asks for
// it (not biases, not LayerNorm). Gradients must already be reduced over data parallelism,
// unscaled and clipped when step() is called.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "parallel/parameter.h"

namespace megatron {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

class AdamW {
 public:
  AdamW(ParameterStore& store, const AdamWConfig& config);

  // One update of every parameter with learning rate `lr`; bias correction uses the number
  // of steps taken so far (skipped steps do not count).
  void step(double lr);
  int64_t steps() const { return steps_; }

  // "exp_avg", "exp_avg_sq": f32 [total local elements], laid out as store.flat_values().
  std::map<std::string, Tensor> flat_buffers() const;
  nlohmann::json state() const { return {{"steps", steps_}}; }
  void load_state(const nlohmann::json& state);

 private:
  ParameterStore& store_;
  AdamWConfig config_;
  Tensor exp_avg_;     // f32 [total local elements]
  Tensor exp_avg_sq_;  // f32 [total local elements]
  int64_t steps_ = 0;
};

}  // namespace megatron
