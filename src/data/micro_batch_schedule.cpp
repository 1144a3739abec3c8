#include "data/micro_batch_schedule.h"

#include "core/error.h"

namespace megatron {

MicroBatchSchedule::MicroBatchSchedule(int64_t micro_batch, int64_t global_batch, int dp_rank,
                                       int dp_size, int64_t consumed_samples)
    : micro_batch_(micro_batch),
      global_batch_(global_batch),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      start_(consumed_samples) {
  MT_CHECK(micro_batch >= 1, "--micro-batch-size must be >= 1, got ", micro_batch);
  MT_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size, "data-parallel rank ", dp_rank,
           " out of range for data-parallel size ", dp_size);
  MT_CHECK(global_batch >= 1 && global_batch % (micro_batch * dp_size) == 0, "--global-batch-size ",
           global_batch,
           " is not a positive multiple of --micro-batch-size × data-parallel size = ", micro_batch,
           " × ", dp_size);
  MT_CHECK(consumed_samples >= 0, "consumed samples ", consumed_samples, " is negative");
  steps_per_global_ = global_batch / (micro_batch * dp_size);
}

int64_t MicroBatchSchedule::first_sample(int64_t n) const {
  const int64_t global = n / steps_per_global_;
  const int64_t step = n % steps_per_global_;
  return start_ + global * global_batch_ + step * micro_batch_ * dp_size_ + dp_rank_ * micro_batch_;
}

int64_t MicroBatchSchedule::consumed_after(int64_t n) const {
  return start_ + (n / steps_per_global_) * global_batch_;
}

}  // namespace megatron
