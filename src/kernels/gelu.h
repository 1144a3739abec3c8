// Bias + GeLU, tanh approximation: gelu(u) = 0.5·u·(1 + tanh(√(2/π)·(u + 0.044715·u³))),
// u = x + bias. x, y, dx [N, C] (f32 or bf16, one dtype), bias [C] (dtype of x).
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y);
// dx = dy · gelu'(x + bias) (written); dbias [C] f32 += Σ_rows dx.
void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias);

}  // namespace megatron::kernels
