// LayerNorm over the last dimension, statistics in f32.
//   x [N, C] (f32 or bf16), gamma/beta [C] f32, y [N, C] (dtype of x)
//   mean/rstd [N] f32, saved for backward; rstd = 1 / sqrt(var + eps), var biased (÷C).
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd);

// dx [N, C] is written (beta_dx = 0) or accumulated into (beta_dx = 1: dx += ...), so the
// residual-stream gradient can be summed in place. dgamma, dbeta [C] f32 are accumulated (+=).
void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        float beta_dx = 0.0f);

}  // namespace megatron::kernels
