// Bias + tanh, the activation of BERT's pooler: y = tanh(x + bias).
//   x, y, dy, dx [N, C] (f32 or bf16, one dtype); bias [C] (dtype of x) or undefined.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

// y may alias x (in place).
void bias_tanh_forward(const Tensor& x, const Tensor& bias, Tensor& y);
// dx = dy · (1 − y²) (written; may alias dy). Uses the forward OUTPUT y, so the input need not
// be kept. dbias [C] f32 += Σ_rows dx when defined, summed in row order (deterministic).
void bias_tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias);

}  // namespace megatron::kernels
