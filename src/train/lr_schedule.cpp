#include "train/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace megatron {

LrDecayStyle lr_decay_style_from_name(const std::string& name) {
  if (name == "constant") return LrDecayStyle::Constant;
  if (name == "linear") return LrDecayStyle::Linear;
  if (name == "cosine") return LrDecayStyle::Cosine;
  MT_THROW("--lr-decay-style must be constant, linear or cosine, got '", name, "'");
}

LrSchedule::LrSchedule(const LrScheduleConfig& config) : config_(config) {
  MT_REQUIRE(config.max_lr >= config.min_lr && config.min_lr >= 0.0,
             "learning rate schedule needs 0 <= min_lr <= max_lr, got min_lr ", config.min_lr,
             " max_lr ", config.max_lr);
  MT_REQUIRE(config.warmup_steps >= 0, "learning rate warmup must be >= 0 samples");
  MT_REQUIRE(config.style == LrDecayStyle::Constant || config.decay_steps > config.warmup_steps,
             "learning rate decay (", config.decay_steps,
             " samples) must be longer than the warmup (", config.warmup_steps, " samples)");
}

// The same branches, in the same order, as OptimizerParamScheduler.get_lr.
double LrSchedule::lr() const {
  const LrScheduleConfig& c = config_;
  if (c.warmup_steps > 0 && num_steps_ <= c.warmup_steps)
    return c.max_lr * double(num_steps_) / double(c.warmup_steps);
  if (c.style == LrDecayStyle::Constant) return c.max_lr;
  if (num_steps_ > c.decay_steps) return c.min_lr;
  const double ratio = double(num_steps_ - c.warmup_steps) / double(c.decay_steps - c.warmup_steps);
  const double coeff = c.style == LrDecayStyle::Linear
                           ? 1.0 - ratio
                           : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return c.min_lr + coeff * (c.max_lr - c.min_lr);
}

nlohmann::json LrSchedule::state() const {
  return {{"num_steps", num_steps_},
          {"max_lr", config_.max_lr},
          {"min_lr", config_.min_lr},
          {"warmup_steps", config_.warmup_steps},
          {"decay_steps", config_.decay_steps},
          {"decay_style", int(config_.style)}};
}

void LrSchedule::load_state(const nlohmann::json& state) {
  MT_REQUIRE(state.contains("num_steps"), "checkpoint scheduler state has no 'num_steps'");
  num_steps_ = state.at("num_steps").get<int64_t>();
}

}  // namespace megatron
