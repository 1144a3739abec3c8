// Scaled, masked softmax over the last dimension, computed in f32.
//   scores [B, H, Sq, Sk] (f32 or bf16), probs [B, H, Sq, Sk] (dtype of scores)
//   probs = softmax(scale · scores + mask), where masked positions get -inf:
//   causal: key j > query i is masked (Sq == Sk); pad_mask [B, Sk] u8, 1 = key is padding, or
//   [B, Sq, Sk] u8, 1 = key masked for that query (DSA's top-k selection, shared by the heads).
// A row whose every key is masked yields all zeros (never NaN).
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

void scaled_masked_softmax_forward(const Tensor& scores, float scale, bool causal,
                                   const Tensor& pad_mask, Tensor& probs);
// dscores = scale · probs ⊙ (dprobs − Σ_j dprobs·probs) (written).
void scaled_masked_softmax_backward(const Tensor& dprobs, const Tensor& probs, float scale,
                                    Tensor& dscores);

}  // namespace megatron::kernels
