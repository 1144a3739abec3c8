// Bias + GeLU, u = x + bias, in one of Megatron's two forms:
//   kErf  (Megatron's default, HF "gelu"):         gelu(u) = u·Φ(u) = ½·u·(1 + erf(u/√2))
//   kTanh (--openai-gelu, HF "gelu_new" / GPT-2):  gelu(u) = ½·u·(1 + tanh(√(2/π)·(u +
//   0.044715·u³)))
// x, y, dx [N, C] (f32 or bf16, one dtype), bias [C] (dtype of x).
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

enum class GeluForm { kErf, kTanh };

// "erf" / "tanh", for messages and logs.
const char* gelu_form_name(GeluForm form);

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y, GeluForm form);
// dx = dy · gelu'(x + bias) (written); dbias [C] f32 += Σ_rows dx.
void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias, GeluForm form);

}  // namespace megatron::kernels
