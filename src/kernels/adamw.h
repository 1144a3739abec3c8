// Fused AdamW over flat f32 buffers (decoupled weight decay, bias-corrected moments):
//   m = β1·m + (1−β1)·g;  v = β2·v + (1−β2)·g²
//   p = p − lr·( (m / (1−β1^step)) / (sqrt(v / (1−β2^step)) + eps) + weight_decay·p )
// Matches torch.optim.AdamW (and Megatron's Apex FusedAdam with adam_w_mode).
#pragma once

#include <cstdint>

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

// param, grad, exp_avg, exp_avg_sq: contiguous f32 of one numel.
void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h);

}  // namespace megatron::kernels
