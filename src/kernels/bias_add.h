// Bias addition over rows, for linear layers whose bias is not fused into a following kernel
// (fused QKV, and ColumnParallelLinear/RowParallelLinear without skip_bias_add).
//   y [N, C] (f32 or bf16), bias [C] (dtype of y), dbias [C] f32.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

// y[n, c] += bias[c] (in place).
void bias_add_forward(Tensor& y, const Tensor& bias);
// dbias[c] += Σ_n dy[n, c], summed in row order (deterministic whatever the thread count).
void bias_add_backward(const Tensor& dy, Tensor& dbias);

}  // namespace megatron::kernels
