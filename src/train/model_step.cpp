// ModelStep's default schedule: no pipelining, one micro-batch after the other.
#include "train/model_step.h"

#include <cmath>

namespace megatron {

bool LossTerms::finite() const {
  double mtp_sum = 0;
  for (double loss : mtp) mtp_sum += loss;
  return std::isfinite(lm + sop + total + logits_distillation + intermediate_distillation +
                       indexer + mtp_sum);
}

LossTerms ModelStep::train_micro_batches(int64_t micro_batches, float grad_scale, uint64_t seed,
                                         int64_t iteration) {
  LossTerms sum;
  for (int64_t m = 0; m < micro_batches; ++m) {
    sum += train_micro_batch(grad_scale, seed, iteration);
  }
  return sum;
}

LossTerms ModelStep::valid_micro_batches(int64_t micro_batches, int64_t iteration) {
  LossTerms sum;
  for (int64_t m = 0; m < micro_batches; ++m) {
    sum += valid_micro_batch(iteration);
  }
  return sum;
}

}  // namespace megatron
