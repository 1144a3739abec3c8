#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <type_traits>

#include "core/error.h"
#include "core/logging.h"

namespace megatron {

LrDecayStyle lr_decay_style_from_name(const std::string& name) {
  if (name == "constant") return LrDecayStyle::Constant;
  if (name == "linear") return LrDecayStyle::Linear;
  if (name == "cosine") return LrDecayStyle::Cosine;
  if (name == "inverse-square-root") return LrDecayStyle::InverseSquareRoot;
  if (name == "WSD") return LrDecayStyle::WSD;
  MT_THROW("--lr-decay-style must be constant, linear, cosine, inverse-square-root or WSD, got '",
           name, "'");
}

const char* lr_decay_style_name(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::Constant:
      return "constant";
    case LrDecayStyle::Linear:
      return "linear";
    case LrDecayStyle::Cosine:
      return "cosine";
    case LrDecayStyle::InverseSquareRoot:
      return "inverse-square-root";
    case LrDecayStyle::WSD:
      return "WSD";
  }
  return "unknown";
}

WsdDecayStyle wsd_decay_style_from_name(const std::string& name) {
  if (name == "exponential") return WsdDecayStyle::Exponential;
  if (name == "linear") return WsdDecayStyle::Linear;
  if (name == "cosine") return WsdDecayStyle::Cosine;
  if (name == "minus_sqrt") return WsdDecayStyle::MinusSqrt;
  MT_THROW("--lr-wsd-decay-style must be exponential, linear, cosine or minus_sqrt, got '", name,
           "'");
}

WeightDecayIncrStyle weight_decay_incr_style_from_name(const std::string& name) {
  if (name == "constant") return WeightDecayIncrStyle::Constant;
  if (name == "linear") return WeightDecayIncrStyle::Linear;
  if (name == "cosine") return WeightDecayIncrStyle::Cosine;
  MT_THROW("--weight-decay-incr-style must be constant, linear or cosine, got '", name, "'");
}

const char* weight_decay_incr_style_name(WeightDecayIncrStyle style) {
  switch (style) {
    case WeightDecayIncrStyle::Constant:
      return "constant";
    case WeightDecayIncrStyle::Linear:
      return "linear";
    case WeightDecayIncrStyle::Cosine:
      return "cosine";
  }
  return "unknown";
}

LrSchedule::LrSchedule(const LrScheduleConfig& config) : config_(config) {
  MT_REQUIRE(config.max_lr >= config.min_lr && config.min_lr >= 0.0,
             "learning rate schedule needs 0 <= min_lr <= max_lr, got min_lr ", config.min_lr,
             " max_lr ", config.max_lr);
  MT_REQUIRE(config.warmup_steps >= 0, "learning rate warmup must be >= 0 samples");
  MT_REQUIRE(
      config.style == LrDecayStyle::Constant || double(config.decay_steps) > config.warmup_steps,
      "learning rate decay (", config.decay_steps, " samples) must be longer than the warmup (",
      config.warmup_steps, " samples)");
  MT_REQUIRE(config.style != LrDecayStyle::WSD ||
                 (config.wsd_decay_steps > 0 && config.wsd_decay_steps <= config.decay_steps),
             "--lr-decay-style WSD needs --lr-wsd-decay-iters (or -samples) between 1 and the "
             "decay length");
  MT_REQUIRE(config.wd_style == WeightDecayIncrStyle::Constant || config.wd_incr_steps > 0,
             "weight-decay increments need a positive number of training samples");
}

// The same branches, in the same order, as OptimizerParamScheduler.get_lr.
double LrSchedule::lr() const {
  return lr_between(config_.max_lr, config_.min_lr);
}

std::optional<double> LrSchedule::decoupled_lr() const {
  if (!config_.decoupled_max_lr) return std::nullopt;
  return lr_between(*config_.decoupled_max_lr, config_.decoupled_min_lr.value_or(config_.min_lr));
}

std::optional<double> LrSchedule::mup_hidden_lr() const {
  if (config_.mup_width_mult == 1.0) return std::nullopt;
  return lr_between(config_.max_lr / config_.mup_width_mult,
                    config_.min_lr / config_.mup_width_mult);
}

double LrSchedule::lr_between(double max_lr, double min_lr) const {
  const LrScheduleConfig& c = config_;
  const double n = double(num_steps_);
  if (c.warmup_steps > 0 && n <= c.warmup_steps)
    return c.init_lr + (max_lr - c.init_lr) * n / c.warmup_steps;
  if (c.style == LrDecayStyle::Constant) return max_lr;
  if (num_steps_ > c.decay_steps) return min_lr;
  if (c.style == LrDecayStyle::InverseSquareRoot) {
    const double warmup = std::max(c.warmup_steps, 1.0);
    const double steps = std::max(n, 1.0);
    return std::max(min_lr, max_lr * std::sqrt(warmup) / std::sqrt(steps));
  }
  const double ratio = (n - c.warmup_steps) / (double(c.decay_steps) - c.warmup_steps);
  double coeff = 0;
  switch (c.style) {
    case LrDecayStyle::Linear:
      coeff = 1.0 - ratio;
      break;
    case LrDecayStyle::Cosine:
      coeff = 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
      break;
    case LrDecayStyle::WSD: {
      const int64_t anneal_start = c.decay_steps - c.wsd_decay_steps;
      if (num_steps_ <= anneal_start) {
        coeff = 1.0;
        break;
      }
      const double r = double(num_steps_ - anneal_start) / double(c.wsd_decay_steps);
      switch (c.wsd_style) {
        case WsdDecayStyle::Linear:
          coeff = 1.0 - r;
          break;
        case WsdDecayStyle::Cosine:
          coeff = 0.5 * (std::cos(std::numbers::pi * r) + 1.0);
          break;
        case WsdDecayStyle::Exponential:
          coeff = 2.0 * std::pow(0.5, r) - 1.0;
          break;
        case WsdDecayStyle::MinusSqrt:
          coeff = 1.0 - std::sqrt(r);
          break;
      }
      break;
    }
    case LrDecayStyle::Constant:
    case LrDecayStyle::InverseSquareRoot:
      break;  // returned above
  }
  return min_lr + coeff * (max_lr - min_lr);
}

// OptimizerParamScheduler.get_wd.
double LrSchedule::wd() const {
  const LrScheduleConfig& c = config_;
  if (num_steps_ > c.wd_incr_steps || c.wd_style == WeightDecayIncrStyle::Constant) return c.end_wd;
  const double ratio = double(num_steps_) / double(c.wd_incr_steps);
  const double coeff = c.wd_style == WeightDecayIncrStyle::Linear
                           ? ratio
                           : 0.5 * (std::cos(std::numbers::pi * (1.0 - ratio)) + 1.0);
  return c.start_wd + coeff * (c.end_wd - c.start_wd);
}

nlohmann::json LrSchedule::state() const {
  return {{"num_steps", num_steps_},
          {"max_lr", config_.max_lr},
          {"min_lr", config_.min_lr},
          {"warmup_steps", config_.warmup_steps},
          {"decay_steps", config_.decay_steps},
          {"decay_style", int(config_.style)},
          {"start_wd", config_.start_wd},
          {"end_wd", config_.end_wd},
          {"wd_incr_steps", config_.wd_incr_steps},
          {"wd_incr_style", int(config_.wd_style)}};
}

namespace {

std::string setting_text(double v) {
  return nlohmann::json(v).dump();
}
std::string setting_text(int64_t v) {
  return std::to_string(v);
}
std::string setting_text(LrDecayStyle v) {
  return lr_decay_style_name(v);
}
std::string setting_text(WeightDecayIncrStyle v) {
  return weight_decay_incr_style_name(v);
}

// A stored setting; an enum is stored as its int, and checked against the last value `last`.
template <typename T>
T stored_setting(const nlohmann::json& value, T last = T()) {
  if constexpr (std::is_enum_v<T>) {
    const int v = value.get<int>();
    MT_REQUIRE(v >= 0 && v <= int(last), "the checkpoint's scheduler state holds an unknown style ",
               v, ": the checkpoint is damaged or from a newer megatron-cpp");
    return T(v);
  } else {
    return value.get<T>();
  }
}

// One stored setting against the command line's, by `restore`.
template <typename T>
void restore_setting(const nlohmann::json& state, const char* key, const char* flag,
                     ScheduleRestore restore, T& field, T last = T()) {
  if (!state.contains(key)) return;
  const T stored = stored_setting<T>(state.at(key), last);
  switch (restore) {
    case ScheduleRestore::kOverride:
      if (stored != field)
        log_info(" > overriding ", flag, " value to ", setting_text(field),
                 " (checkpoint: ", setting_text(stored), ")");
      return;
    case ScheduleRestore::kFromCheckpoint:
      if (stored != field)
        log_info(" > using checkpoint value ", setting_text(stored), " for ", flag);
      field = stored;
      return;
    case ScheduleRestore::kCheck:
      MT_REQUIRE(stored == field, "the checkpoint's learning-rate schedule has ", flag, " ",
                 setting_text(stored), ", the command line ", setting_text(field),
                 ": resume with the checkpoint's value, or pass --override-opt_param-scheduler "
                 "to use the command line's or --use-checkpoint-opt_param-scheduler to use the "
                 "checkpoint's (as Megatron-LM)");
      return;
  }
}

}  // namespace

void LrSchedule::load_state(const nlohmann::json& state, ScheduleRestore restore) {
  MT_REQUIRE(state.contains("num_steps"), "checkpoint scheduler state has no 'num_steps'");
  // The settings Megatron checks, in its order. Steps are samples (iterations x global batch).
  LrScheduleConfig& c = config_;
  restore_setting(state, "max_lr", "--lr", restore, c.max_lr);
  restore_setting(state, "min_lr", "--min-lr", restore, c.min_lr);
  restore_setting(state, "warmup_steps", "warmup samples (--lr-warmup-*)", restore, c.warmup_steps);
  restore_setting(state, "decay_steps",
                  "decay samples (--lr-decay-iters/--lr-decay-samples, else the run's length)",
                  restore, c.decay_steps);
  restore_setting(state, "decay_style", "--lr-decay-style", restore, c.style, LrDecayStyle::WSD);
  restore_setting(state, "start_wd", "--start-weight-decay", restore, c.start_wd);
  restore_setting(state, "end_wd", "--end-weight-decay", restore, c.end_wd);
  restore_setting(state, "wd_incr_steps", "weight-decay samples (the run's length)", restore,
                  c.wd_incr_steps);
  restore_setting(state, "wd_incr_style", "--weight-decay-incr-style", restore, c.wd_style,
                  WeightDecayIncrStyle::Cosine);
  num_steps_ = state.at("num_steps").get<int64_t>();
}

}  // namespace megatron
