#include "optim/grad_scaler.h"

#include <algorithm>

#include "core/error.h"

namespace megatron {

GradScaler::GradScaler(const GradScalerConfig& config)
    : config_(config), scale_(config.initial_scale), hysteresis_tracker_(config.hysteresis) {
  MT_REQUIRE(config.initial_scale > 0, "loss scale must be positive, got ", config.initial_scale);
  MT_REQUIRE(!config.dynamic ||
                 (config.min_scale > 0 && config.growth_interval > 0 && config.hysteresis > 0),
             "dynamic loss scaler needs --min-loss-scale > 0, --loss-scale-window > 0 and "
             "--hysteresis > 0");
}

// The same state machine as Megatron's DynamicGradScaler.update.
void GradScaler::update(bool found_inf) {
  if (!config_.dynamic) return;
  if (found_inf) {
    growth_tracker_ = 0;
    hysteresis_tracker_ -= 1;
    if (hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * 0.5, config_.min_scale);
  } else {
    growth_tracker_ += 1;
    if (growth_tracker_ == config_.growth_interval) {
      growth_tracker_ = 0;
      hysteresis_tracker_ = config_.hysteresis;
      scale_ *= 2.0;
    }
  }
}

nlohmann::json GradScaler::state() const {
  return {{"scale", scale_},
          {"growth_tracker", growth_tracker_},
          {"hysteresis_tracker", hysteresis_tracker_}};
}

void GradScaler::load_state(const nlohmann::json& state) {
  if (!config_.dynamic) return;  // a constant scale comes from the flags
  MT_REQUIRE(state.contains("scale") && state.contains("growth_tracker") &&
                 state.contains("hysteresis_tracker"),
             "checkpoint loss-scaler state needs scale, growth_tracker and hysteresis_tracker");
  scale_ = state.at("scale").get<double>();
  growth_tracker_ = state.at("growth_tracker").get<int64_t>();
  hysteresis_tracker_ = state.at("hysteresis_tracker").get<int64_t>();
}

}  // namespace megatron
