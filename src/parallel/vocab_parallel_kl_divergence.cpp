#include "parallel/vocab_parallel_kl_divergence.h"

#include <algorithm>

#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/indexing.h"

namespace megatron {

namespace {

// The softmax statistics of `z` [N, V/t] over the whole (unpadded) vocabulary, through the
// cross-entropy's kernels with targets no shard owns: the global row max, Σexp and
// log Σexp(z) = log Σexp + max (each f32 [N]).
struct SoftmaxStats {
  Tensor max, sum_exp, log_normalizer;
};

SoftmaxStats softmax_stats(const VocabParallelKlCtx& ctx, Communicator& tp, const Tensor& z,
                           Arena& arena) {
  const int64_t n = z.size(0);
  SoftmaxStats s{arena.alloc({n}, DType::F32), Tensor(), arena.alloc({n}, DType::F32)};
  kernels::cross_entropy_row_max(z, ctx.valid_cols, s.max);
  if (tp.size() > 1) tp.all_reduce(s.max, ReduceOp::MAX);
  Tensor sums = arena.alloc({2, n}, DType::F32);  // [2, N]: Σexp, "target" logit (always 0)
  s.sum_exp = sums.select(0, 0);
  Tensor zero = sums.select(0, 1);
  kernels::cross_entropy_sum_exp_target(z, ctx.no_targets, ctx.vocab_start, ctx.valid_cols, s.max,
                                        s.sum_exp, zero);
  if (tp.size() > 1) tp.all_reduce(s.sum_exp, ReduceOp::SUM);
  kernels::cross_entropy_loss(s.max, s.sum_exp, zero, s.log_normalizer);
  return s;
}

// f32 copy of logits / T in the arena.
Tensor scaled_copy(const Tensor& logits, float temperature, Arena& arena) {
  Tensor z = arena.alloc(logits.shape(), DType::F32);
  kernels::copy(logits, z);
  if (temperature != 1.0f) kernels::scale(z, 1.0f / temperature);
  return z;
}

}  // namespace

double vocab_parallel_kl_forward(VocabParallelKlCtx& ctx, Communicator& tp,
                                 const Tensor& student_logits, const Tensor& teacher_logits,
                                 float temperature, int64_t vocab_size, const Tensor& loss_mask,
                                 Arena& arena) {
  MT_CHECK(student_logits.dim() == 2 && teacher_logits.shape() == student_logits.shape(),
           "vocab-parallel KL: student and teacher logits must be one shape [N, V/t], got ",
           student_logits.describe(), " and ", teacher_logits.describe());
  MT_CHECK(temperature > 0, "vocab-parallel KL: the temperature must be positive, got ",
           temperature);
  const int64_t n = student_logits.size(0), v_local = student_logits.size(1);
  check_shape(loss_mask, {n}, "vocab-parallel KL loss mask");
  check_dtype(loss_mask, DType::F32, "vocab-parallel KL loss mask");
  MT_CHECK(vocab_size <= v_local * tp.size(), "vocabulary size ", vocab_size, " exceeds the ",
           v_local * tp.size(), " logit columns");
  ctx.temperature = temperature;
  ctx.loss_mask = loss_mask;
  ctx.vocab_start = int64_t(tp.rank()) * v_local;
  ctx.valid_cols = std::clamp<int64_t>(vocab_size - ctx.vocab_start, 0, v_local);
  // Every target = vocab_size, past every shard's real columns: no shard owns it. (The
  // position kernel with one "sequence position" per N ids is the i32 constant fill.)
  ctx.no_targets = arena.alloc({n}, DType::I32);
  kernels::fill_positions(ctx.no_targets, n, vocab_size);

  ctx.student = scaled_copy(student_logits, temperature, arena);
  Tensor teacher = scaled_copy(teacher_logits, temperature, arena);
  const SoftmaxStats s = softmax_stats(ctx, tp, ctx.student, arena);
  const SoftmaxStats t = softmax_stats(ctx, tp, teacher, arena);
  ctx.student_max = s.max;
  ctx.student_sum = s.sum_exp;
  // mask · p_t: the cross-entropy's gradient with no target is dloss · softmax.
  ctx.teacher_prob = arena.alloc(teacher.shape(), DType::F32);
  kernels::cross_entropy_backward(teacher, ctx.no_targets, ctx.vocab_start, ctx.valid_cols, t.max,
                                  t.sum_exp, loss_mask, ctx.teacher_prob);
  // KL_n = Σ_v p_t (z_t − z_s) − log Z_t + log Z_s (Σ_v p_t = 1); the first sum is the only
  // vocabulary-wide one: local, masked and summed over tokens, then one scalar over TP.
  kernels::axpy(-1.0f, ctx.student, teacher);  // teacher := z_t − z_s
  double cross = kernels::weighted_sum(teacher, ctx.teacher_prob).weighted;
  if (tp.size() > 1) cross = tp.all_reduce_scalar(cross);
  return cross - kernels::weighted_sum(t.log_normalizer, loss_mask).weighted +
         kernels::weighted_sum(s.log_normalizer, loss_mask).weighted;
}

void vocab_parallel_kl_backward(const VocabParallelKlCtx& ctx, float coef, Tensor& dstudent,
                                Arena& arena) {
  check_shape(dstudent, ctx.student.shape(), "vocab-parallel KL student gradient");
  check_dtype(dstudent, DType::F32, "vocab-parallel KL student gradient");
  const float c = coef / ctx.temperature;
  Tensor dloss = arena.alloc(ctx.loss_mask.shape(), DType::F32);  // c · mask
  kernels::copy(ctx.loss_mask, dloss);
  kernels::scale(dloss, c);
  Tensor student_prob = arena.alloc(ctx.student.shape(), DType::F32);  // c · mask · p_s
  kernels::cross_entropy_backward(ctx.student, ctx.no_targets, ctx.vocab_start, ctx.valid_cols,
                                  ctx.student_max, ctx.student_sum, dloss, student_prob);
  kernels::axpy(1.0f, student_prob, dstudent);
  kernels::axpy(-c, ctx.teacher_prob, dstudent);
}

}  // namespace megatron
