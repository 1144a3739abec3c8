// SwiGLU (Shazeer 2020, "GLU Variants Improve Transformer"): y = silu(a) ⊙ u,
// silu(a) = a · σ(a), on rows that hold the gate a and the up projection u side by side.
//   x [N, 2F] = [a | u] per row (the column-parallel fc1's local output: each TP rank's rows
//   of fc1 are its gate slice then its up slice), y [N, F]; f32 or bf16, one dtype;
//   computed in f32.
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void swiglu_forward(const Tensor& x, Tensor& y);
// dx [N, 2F] = [dy · u · silu'(a) | dy · silu(a)], silu'(a) = σ(a) · (1 + a · (1 − σ(a))).
void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx);

}  // namespace megatron::kernels
