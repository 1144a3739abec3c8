#include "parallel/vocab_parallel_cross_entropy.h"

#include <algorithm>

#include "kernels/cross_entropy.h"
#include "kernels/indexing.h"

namespace megatron {

Tensor vocab_parallel_cross_entropy_forward(VocabParallelCrossEntropyCtx& ctx, Communicator& tp,
                                            const Tensor& logits, const Tensor& targets,
                                            int64_t vocab_size, Arena& arena) {
  MT_CHECK(logits.dim() == 2, "vocab-parallel cross entropy: logits must be [N, V/t], got ",
           logits.describe());
  const int64_t n = logits.size(0), v_local = logits.size(1);
  check_shape(targets, {n}, "vocab-parallel cross entropy targets");
  check_dtype(targets, DType::I32, "vocab-parallel cross entropy targets");
  const int64_t bad = kernels::first_out_of_range(targets, 0, vocab_size);
  MT_REQUIRE(bad < 0, "label ", element_value<int32_t>(targets, bad), " at token ", bad,
             " is outside the vocabulary [0, ", vocab_size, ")");
  MT_CHECK(vocab_size <= v_local * tp.size(), "vocabulary size ", vocab_size, " exceeds the ",
           v_local * tp.size(), " logit columns");

  ctx.logits = logits;
  ctx.targets = targets;
  ctx.vocab_start = int64_t(tp.rank()) * v_local;
  ctx.valid_cols = std::clamp<int64_t>(vocab_size - ctx.vocab_start, 0, v_local);

  ctx.row_max = arena.alloc({n}, DType::F32);  // [N]
  kernels::cross_entropy_row_max(logits, ctx.valid_cols, ctx.row_max);
  if (tp.size() > 1) tp.all_reduce(ctx.row_max, ReduceOp::MAX);

  Tensor sums = arena.alloc({2, n}, DType::F32);  // [2, N]: Σexp, target logit
  ctx.sum_exp = sums.select(0, 0);
  Tensor target_logit = sums.select(0, 1);
  kernels::cross_entropy_sum_exp_target(logits, targets, ctx.vocab_start, ctx.valid_cols,
                                        ctx.row_max, ctx.sum_exp, target_logit);
  if (tp.size() > 1) tp.all_reduce(sums, ReduceOp::SUM);

  Tensor loss = arena.alloc({n}, DType::F32);  // [N]
  kernels::cross_entropy_loss(ctx.row_max, ctx.sum_exp, target_logit, loss);
  return loss;
}

Tensor vocab_parallel_cross_entropy_backward(const VocabParallelCrossEntropyCtx& ctx,
                                             const Tensor& dloss) {
  Tensor dlogits = ctx.logits;
  kernels::cross_entropy_backward(ctx.logits, ctx.targets, ctx.vocab_start, ctx.valid_cols,
                                  ctx.row_max, ctx.sum_exp, dloss, dlogits);
  return dlogits;
}

}  // namespace megatron
