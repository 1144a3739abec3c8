// Fused AdamW over flat f32 buffers (decoupled weight decay, bias-corrected moments):
//   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   p = p − lr·( (m / (1−β1^step)) / (sqrt(v / (1−β2^step)) + eps) + weight_decay·p )
// Matches torch.optim.AdamW (and Megatron's Apex FusedAdam with adam_w_mode).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace megatron::kernels {

struct AdamWHyper {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  int64_t step;  // 1 for the first update
};

// Elements [begin, end) of the flat buffers, updated with weight decay h.weight_decay (decay)
// or none (biases, norms).
struct AdamWRun {
  int64_t begin;
  int64_t end;
  bool decay;
};

// param, grad, exp_avg, exp_avg_sq: contiguous f32 of one numel. `runs` sorted, disjoint, inside
// [0, numel); elements in no run are left unchanged. One pass over all runs, so a model's
// alternating weights and biases cost one parallel loop, not one per parameter.
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h, const std::vector<AdamWRun>& runs);
// The whole buffers as one run with weight decay h.weight_decay.
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h);

}  // namespace megatron::kernels
