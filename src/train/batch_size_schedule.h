// BatchSizeSchedule: the global batch size of each training step, as Megatron-LM's
// megatron/core/num_microbatches_calculator.py — constant (--global-batch-size) or step-wise
// (--step-batch-size-schedule, StepBatchsizeNumMicroBatchesCalculator).
//
// A schedule is a list of (threshold, batch size) steps sorted by threshold: the global batch
// of a step that starts after `consumed` samples is the batch size of the last step whose
// threshold is <= consumed. Megatron's schedule string is "THRESHOLD:BS THRESHOLD:BS ..."
// (commas also separate entries); each number is a float with an optional K/M/B/T suffix
// (1e3/1e6/1e9/1e12), truncated to an integer after the multiplication; thresholds are tokens,
// converted to samples by floor division by --seq-length (Megatron's training always passes
// seq_length). The steps are sorted by threshold; the first must be 0, thresholds strictly
// increasing, batch sizes positive. Divisibility by --micro-batch-size x DP is checked only
// where the batch size is used (num_micro_batches), as in Megatron, so that entries a resumed
// run has already passed may be smaller than its new DP size allows.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace megatron {

class BatchSizeSchedule {
 public:
  using Step = std::pair<int64_t, int64_t>;  // (threshold in samples, global batch size)

  // Throws Error unless global_batch >= 1.
  static BatchSizeSchedule constant(int64_t global_batch);
  // Megatron's _parse_schedule + _validate_schedule; seq_length >= 1 converts token
  // thresholds to samples, 0 keeps them as samples. Throws Error naming
  // --step-batch-size-schedule and the offending entry.
  static BatchSizeSchedule parse(const std::string& schedule, int64_t seq_length);

  const std::vector<Step>& steps() const { return steps_; }
  bool is_constant() const { return steps_.size() == 1; }

  // The global batch size of the step starting after `consumed_samples`.
  int64_t global_batch_at(int64_t consumed_samples) const;
  // global_batch_at / (micro_batch x dp_size). Throws Error (Megatron's consistency check,
  // in its words) when that batch is not a multiple of micro_batch x dp_size.
  int64_t num_micro_batches_at(int64_t consumed_samples, int64_t micro_batch,
                               int64_t dp_size) const;
  // Throws Error when a step still to come after `consumed_samples` (or the current one) has
  // a batch that is not a multiple of micro_batch x dp_size: the check Megatron makes when it
  // reaches that step, made at the start of the run.
  void check_divisible_from(int64_t consumed_samples, int64_t micro_batch, int64_t dp_size) const;
  // Megatron's update_train_iters for --train-samples with a step schedule: the number of
  // steps until at least train_samples samples are consumed. (With a constant batch size
  // Megatron rounds down instead: train_samples // global_batch_size.)
  int64_t iterations_for_samples(int64_t train_samples) const;
  // The largest batch size of any step.
  int64_t max_global_batch() const;

 private:
  explicit BatchSizeSchedule(std::vector<Step> steps) : steps_(std::move(steps)) {}
  std::vector<Step> steps_;
};

}  // namespace megatron
