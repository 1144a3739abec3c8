// LrSchedule: Megatron's OptimizerParamScheduler for the learning rate, counted in samples.
//
// Linear warmup from 0 to max_lr over warmup_steps samples, then constant, linear or cosine
// decay to min_lr at decay_steps samples, min_lr afterwards. step(global_batch) is called only
// after a successful optimizer step; the rate an iteration uses is lr() before its step (so,
// as in Megatron, the first iteration of a warmup runs at lr 0).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace megatron {

enum class LrDecayStyle { Constant, Linear, Cosine };
LrDecayStyle lr_decay_style_from_name(const std::string& name);  // "constant" | ...

struct LrScheduleConfig {
  double max_lr = 0;
  double min_lr = 0;
  int64_t warmup_steps = 0;  // samples
  int64_t decay_steps = 0;   // samples, counted from 0 (includes the warmup)
  LrDecayStyle style = LrDecayStyle::Linear;
};

class LrSchedule {
 public:
  explicit LrSchedule(const LrScheduleConfig& config);
  double lr() const;  // at the current number of samples
  void step(int64_t samples) { num_steps_ += samples; }
  int64_t num_steps() const { return num_steps_; }

  // Checkpoint state: the sample counter plus the config, so a resumed run can check it.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& state);

 private:
  LrScheduleConfig config_;
  int64_t num_steps_ = 0;
};

}  // namespace megatron
