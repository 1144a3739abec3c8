// RMSNorm over the last dimension (Zhang & Sennrich 2019; Llama's norm), statistics in f32:
//   y = x · rstd · γ,  rstd = 1 / sqrt(mean(x²) + eps)   (no mean subtraction, no β)
//   x [N, C] (f32 or bf16), gamma [C] f32, y [N, C] (dtype of x), rstd [N] f32 saved for
//   backward.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, Tensor& y, Tensor& rstd);

// dx = rstd · (g − x̂ · mean(g · x̂)) with g = dy · γ and x̂ = x · rstd; dx [N, C] is written
// (beta_dx = 0) or accumulated into (beta_dx = 1), as layernorm_backward. dgamma [C] f32 +=
// Σ_rows dy · x̂.
void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      Tensor& dx, Tensor& dgamma, float beta_dx = 0.0f);

}  // namespace megatron::kernels
