// Vocab-parallel KL divergence between a teacher's and a student's softmax (knowledge
// distillation's logits loss, docs/distillation.md): per token
//   KL(p_t ‖ p_s) = Σ_v p_t(v) · (log p_t(v) − log p_s(v)),   p = softmax(logits / T)
// with both logits split along the vocabulary like the cross-entropy's (Megatron-LM §3): each
// rank holds global columns [r·V/t, (r+1)·V/t) of both. Only per-token statistics cross the
// wire — the row maxima (all-reduce MAX), the Σexp (all-reduce SUM) and the masked sum of the
// local Σ p_t·(z_t − z_s) (one scalar) — never a full-vocabulary row. Padded vocabulary
// columns (global id >= vocab_size) are excluded from both softmaxes, as from the
// cross-entropy's, so the loss does not depend on the padding (which depends on TP).
// The teacher is frozen: the backward gives the student's logit gradient only,
//   ∂KL/∂z_s = (p_s − p_t) / T.
#pragma once

#include "core/arena.h"
#include "distributed/communicator.h"

namespace megatron {

struct VocabParallelKlCtx {
  Tensor student;       // f32 [N, V/t] student logits / T
  Tensor teacher_prob;  // f32 [N, V/t] mask · p_t (0 on padding)
  Tensor student_max;   // f32 [N] global max of student logits / T
  Tensor student_sum;   // f32 [N] global Σ exp(student / T − max)
  Tensor no_targets;    // i32 [N]: an id no shard owns (the softmax statistics alone)
  Tensor loss_mask;     // f32 [N]
  float temperature = 1;
  int64_t vocab_start = 0;
  int64_t valid_cols = 0;
};

// student_logits, teacher_logits f32 [N, V/t] (this rank's shards, same columns), loss_mask
// f32 [N] → Σ_n mask[n] · KL_n over the whole vocabulary, identical on every rank (collective
// over `tp`). Neither input is changed.
double vocab_parallel_kl_forward(VocabParallelKlCtx& ctx, Communicator& tp,
                                 const Tensor& student_logits, const Tensor& teacher_logits,
                                 float temperature, int64_t vocab_size, const Tensor& loss_mask,
                                 Arena& arena);

// dstudent f32 [N, V/t] += coef · mask[n] · (p_s − p_t) / T: the gradient of coef · the
// forward's masked sum. No communication.
void vocab_parallel_kl_backward(const VocabParallelKlCtx& ctx, float coef, Tensor& dstudent,
                                Arena& arena);

}  // namespace megatron
