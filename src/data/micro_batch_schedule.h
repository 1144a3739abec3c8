// MicroBatchSchedule: which global sample indices a data-parallel rank reads, in order —
// the arithmetic of Megatron's MegatronPretrainingSampler, shared by the GPT and BERT loaders.
//
// A global batch of G samples is consumed as M = G / (b·d) micro-steps of b·d samples;
// in micro-step m of the global batch starting at consumed sample c, DP rank r reads samples
// c + m·b·d + r·b + [0, b). Because this is a pure function of (c, n), a run resumed from a
// consumed-samples count continues exactly where the interrupted one would have.
#pragma once

#include <cstdint>

namespace megatron {

class MicroBatchSchedule {
 public:
  // Throws Error unless micro_batch >= 1, 0 <= dp_rank < dp_size and global_batch is a
  // positive multiple of micro_batch · dp_size.
  MicroBatchSchedule(int64_t micro_batch, int64_t global_batch, int dp_rank, int dp_size,
                     int64_t consumed_samples);

  int64_t micro_batch() const { return micro_batch_; }
  int64_t micro_steps_per_global_batch() const { return steps_per_global_; }
  // Global index of row 0 of this rank's n-th micro-batch (n = 0, 1, ... from the start).
  int64_t first_sample(int64_t n) const;
  // Samples consumed by the global batches completed after `n` micro-batches.
  int64_t consumed_after(int64_t n) const;

 private:
  int64_t micro_batch_;
  int64_t global_batch_;
  int64_t dp_rank_;
  int64_t dp_size_;
  int64_t start_;
  int64_t steps_per_global_;
};

}  // namespace megatron
