// GradReadyListener: told during a backward when gradients are complete for the micro-batch, so
// that the data-parallel reduction of a bucket of them can start while the backward computes the
// rest (--overlap-grad-reduce, optim/grad_buckets.h). The layers stay free of communication:
// a backward only announces, through its ParameterStore, which parameters it has finished.
#pragma once

#include <cstddef>

namespace megatron {

class GradReadyListener {
 public:
  virtual ~GradReadyListener() = default;
  // The backward of one micro-batch has accumulated its last contribution into the gradients of
  // the store's parameters [first, end) (indices in registration order). Called at most once
  // per parameter and micro-batch.
  virtual void grads_accumulated(size_t first, size_t end) = 0;
};

}  // namespace megatron
