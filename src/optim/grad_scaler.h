// GradScaler: the loss scale of mixed-precision training (Megatron's DynamicGradScaler and
// ConstantGradScaler).
//
// Dynamic: starts at initial_scale; an overflow (inf/NaN in any gradient on any rank) skips the
// step, resets the growth counter and uses up one unit of hysteresis — when hysteresis is
// exhausted the scale halves (not below min_scale); growth_interval clean steps in a row double
// the scale and refill the hysteresis. Constant: the scale never changes (bf16 / fp32 use a
// constant 1, fp16 with --loss-scale a constant S); overflows still skip the step.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace megatron {

struct GradScalerConfig {
  bool dynamic = false;
  double initial_scale = 1.0;  // the constant scale when !dynamic
  double min_scale = 1.0;
  int64_t growth_interval = 1000;  // --loss-scale-window
  int64_t hysteresis = 2;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerConfig& config);
  double scale() const { return scale_; }
  // Records the outcome of one step (found_inf must be the same on every rank).
  void update(bool found_inf);

  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  GradScalerConfig config_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t hysteresis_tracker_;
};

}  // namespace megatron
