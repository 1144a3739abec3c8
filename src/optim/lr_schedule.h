// LrSchedule: Megatron's OptimizerParamScheduler — the learning rate and the weight decay as
// functions of the number of samples trained.
//
// Learning rate: linear warmup from init_lr to max_lr over warmup_steps samples (fractional
// with --lr-warmup-fraction, as Megatron keeps it), then constant, linear, cosine,
// inverse-square-root or WSD (warmup-stable-decay: max_lr until the last wsd_decay_steps,
// then a linear / cosine / exponential / minus-sqrt anneal) decay to min_lr at decay_steps
// samples, min_lr afterwards. Weight decay: from start_wd to end_wd over wd_incr_steps samples
// (constant, linear or cosine). step(global_batch) is called only after a successful optimizer
// step; an iteration uses lr() and wd() before its step (so, as in Megatron, the first iteration
// of a warmup from 0 runs at lr 0).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace megatron {

enum class LrDecayStyle { Constant, Linear, Cosine, InverseSquareRoot, WSD };
// Megatron's spellings: "constant", "linear", "cosine", "inverse-square-root", "WSD".
LrDecayStyle lr_decay_style_from_name(const std::string& name);
const char* lr_decay_style_name(LrDecayStyle style);

enum class WsdDecayStyle { Exponential, Linear, Cosine, MinusSqrt };
// "exponential", "linear", "cosine", "minus_sqrt" (--lr-wsd-decay-style).
WsdDecayStyle wsd_decay_style_from_name(const std::string& name);

enum class WeightDecayIncrStyle { Constant, Linear, Cosine };
// "constant", "linear", "cosine" (--weight-decay-incr-style).
WeightDecayIncrStyle weight_decay_incr_style_from_name(const std::string& name);
const char* weight_decay_incr_style_name(WeightDecayIncrStyle style);

struct LrScheduleConfig {
  double max_lr = 0;
  double min_lr = 0;
  double warmup_steps = 0;  // samples (fractional: --lr-warmup-fraction × decay_steps)
  int64_t decay_steps = 0;  // samples, counted from 0 (includes the warmup)
  LrDecayStyle style = LrDecayStyle::Linear;
  double init_lr = 0;           // --lr-warmup-init
  int64_t wsd_decay_steps = 0;  // samples of WSD's final anneal
  WsdDecayStyle wsd_style = WsdDecayStyle::Exponential;
  // Weight-decay increments. Constant: the optimizer's own weight decay is used throughout.
  WeightDecayIncrStyle wd_style = WeightDecayIncrStyle::Constant;
  double start_wd = 0;
  double end_wd = 0;
  int64_t wd_incr_steps = 0;  // samples (the whole run)
  // --decoupled-lr / --decoupled-min-lr: the embedding and output layer's own max_lr and min_lr
  // (ParamSpec::embedding_or_output), on the same warmup and decay; min defaults to min_lr.
  std::optional<double> decoupled_max_lr = std::nullopt;
  std::optional<double> decoupled_min_lr = std::nullopt;
  // --use-mup's width multiplier m: the hidden matrices' max_lr and min_lr are these / m
  // (Megatron's get_mup_config_overrides), on the same warmup (from init_lr) and decay.
  double mup_width_mult = 1.0;
};

// How a resumed run's schedule settings meet the checkpoint's (Megatron's
// OptimizerParamScheduler.load_state_dict): the learning rates, warmup, decay length and style,
// and the weight-decay increments. The sample counter always comes from the checkpoint.
enum class ScheduleRestore {
  kCheck,           // neither flag: the command line's settings must equal the checkpoint's
  kOverride,        // --override-opt_param-scheduler: the command line's, whatever is stored
  kFromCheckpoint,  // --use-checkpoint-opt_param-scheduler: the checkpoint's
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleConfig& config);
  double lr() const;  // at the current number of samples
  // The embedding and output layer's learning rate with --decoupled-lr (nullopt without).
  std::optional<double> decoupled_lr() const;
  // muP's hidden matrices' learning rate (nullopt without muP, or at width multiplier 1).
  std::optional<double> mup_hidden_lr() const;
  // Whether the weight decay changes during the run (wd() then overrides the optimizer's).
  bool varies_weight_decay() const { return config_.wd_style != WeightDecayIncrStyle::Constant; }
  double wd() const;  // at the current number of samples (start_wd == end_wd when constant)
  void step(int64_t samples) { num_steps_ += samples; }
  int64_t num_steps() const { return num_steps_; }

  // Checkpoint state: the sample counter plus the settings, so a resumed run can check them.
  nlohmann::json state() const;
  // Restores the sample counter and, by `restore`, checks the settings against the stored ones
  // (an Error naming the flag, both values and the two ways out) or takes the stored ones.
  // Settings an older checkpoint did not store are the command line's.
  void load_state(const nlohmann::json& state, ScheduleRestore restore);
  const LrScheduleConfig& config() const { return config_; }

 private:
  // The schedule from init_lr up to `max_lr`, decaying to `min_lr`.
  double lr_between(double max_lr, double min_lr) const;

  LrScheduleConfig config_;
  int64_t num_steps_ = 0;
};

}  // namespace megatron
