// A sigmoid gate per row, added into an output (Megatron-Core's --moe-shared-expert-gate: the
// shared expert's output scaled by sigmoid(x·w_gate) per token, model/moe_layer.h):
//   out[n, :] += σ(logits[n]) · y[n, :]
//   dy[n, :]   = σ(logits[n]) · dout[n, :]
//   dlogits[n] = σ'(logits[n]) · Σ_c dout[n, c] · y[n, c]      (σ' = σ(1 − σ))
// y, out, dout, dy [N, C] (f32 or bf16, one dtype; computed in f32, the row sums in double in
// column order); logits, dlogits f32 [N].
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void sigmoid_gate_forward(const Tensor& y, const Tensor& logits, Tensor& out);
// dy and dlogits are written.
void sigmoid_gate_backward(const Tensor& dout, const Tensor& y, const Tensor& logits, Tensor& dy,
                           Tensor& dlogits);

}  // namespace megatron::kernels
