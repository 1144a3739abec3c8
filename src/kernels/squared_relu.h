// Bias + squared ReLU (So et al. 2021, "Primer"; Megatron's --squared-relu, Nemotron's "relu2"),
// u = x + bias:
//   y = relu(u)² = max(u, 0)²,   dx = dy · 2·max(u, 0)
// x, y, dy, dx [N, C] (f32 or bf16, one dtype; computed in f32), bias [C] (dtype of x) or
// undefined, dbias [C] f32 or undefined.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void bias_squared_relu_forward(const Tensor& x, const Tensor& bias, Tensor& y);
// dx (written); dbias += Σ_rows dx when defined.
void bias_squared_relu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                                Tensor& dbias);

}  // namespace megatron::kernels
