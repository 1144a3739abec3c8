// Cosine loss between a student's and a teacher's hidden states (knowledge distillation's
// intermediate-layer loss, docs/distillation.md), as PyTorch's cosine_embedding_loss with
// target 1, which Megatron-LM's ModelOpt distillation uses by default: per token
//   loss = 1 − x·y / sqrt((|x|² + ε)(|y|² + ε)),   ε = 1e-12
// on rows of the full hidden size. With sequence parallelism each TP rank holds its sequence
// shard of the rows, and the masked sum is all-reduced over TP; without it every rank holds
// all rows and computes the same sum. The teacher (y) is frozen: the backward gives ∂/∂x only.
//
// Built from existing kernels: an RMSNorm with γ = 1 and eps = ε/h gives x̂ = √h·x/√(|x|²+ε),
// so cos = x̂·ŷ / h (one batched 1×h·h×1 product per row); the backward is the RMSNorm's of
// ∂/∂x̂ = −ŷ/h, scaled per row by a 1×1·1×h product.
#pragma once

#include "core/arena.h"
#include "distributed/communicator.h"

namespace megatron {

struct HiddenCosineLossCtx {
  Tensor x;          // f32 [N, h] student rows
  Tensor y_hat;      // f32 [N, h] teacher rows · rstd
  Tensor rstd;       // f32 [N] student
  Tensor gamma;      // f32 [h] ones
  Tensor loss_mask;  // f32 [N] (this rank's rows)
  float eps = 0;     // the RMSNorm's
};

// student, teacher [N, h] (same shape, f32 or bf16: the model's hidden states on this rank),
// loss_mask f32 [N] for these rows → Σ mask · loss over all rows of the micro-batch,
// identical on every rank. `sequence_sharded`: the rows are this rank's sequence shard
// (collective over `tp`).
double hidden_cosine_loss_forward(HiddenCosineLossCtx& ctx, Communicator& tp, const Tensor& student,
                                  const Tensor& teacher, const Tensor& loss_mask,
                                  bool sequence_sharded, Arena& arena);

// dstudent [N, h] (the student's dtype) += coef · mask · ∂loss/∂x. No communication.
void hidden_cosine_loss_backward(const HiddenCosineLossCtx& ctx, float coef, Tensor& dstudent,
                                 Arena& arena);

}  // namespace megatron
