// Softmax cross-entropy over a vocabulary shard, in the pieces the vocab-parallel version
// reduces across ranks. logits [N, V_local] (f32 or bf16) hold global columns
// [vocab_start, vocab_start + V_local); only the first `valid_cols` local columns are real
// vocabulary entries (the rest is padding and is excluded). targets [N] i32 (global ids).
// All statistics are f32 [N].
#pragma once

#include "core/tensor.h"

namespace megatron::kernels {

// row_max[n] = max over valid columns (-inf if the shard has none).
void cross_entropy_row_max(const Tensor& logits, int64_t valid_cols, Tensor& row_max);

// Given the global row max: sum_exp[n] = Σ_valid exp(logit − max); target_logit[n] = the
// target's logit if this shard owns it, else 0.
void cross_entropy_sum_exp_target(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                  int64_t valid_cols, const Tensor& row_max, Tensor& sum_exp,
                                  Tensor& target_logit);

// loss[n] = log(sum_exp_global[n]) + max[n] − target_logit_global[n].
void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        Tensor& loss);

// dlogits[n, c] = dloss[n] · (softmax[n, c] − [c is target]); 0 on padding columns.
// dlogits has the dtype of logits and may alias it (in place).
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid_cols, const Tensor& row_max, const Tensor& sum_exp,
                            const Tensor& dloss, Tensor& dlogits);

}  // namespace megatron::kernels
