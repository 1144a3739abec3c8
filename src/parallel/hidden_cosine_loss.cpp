#include "parallel/hidden_cosine_loss.h"

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/rmsnorm.h"

namespace megatron {

namespace {

constexpr float kCosineEpsilon = 1e-12f;  // PyTorch's cosine_embedding_loss

// An f32 copy of `t` in the arena (t itself when already f32).
Tensor as_f32(const Tensor& t, Arena& arena) {
  if (t.dtype() == DType::F32) return t;
  Tensor f = arena.alloc(t.shape(), DType::F32);
  kernels::cast(t, f);
  return f;
}

}  // namespace

double hidden_cosine_loss_forward(HiddenCosineLossCtx& ctx, Communicator& tp, const Tensor& student,
                                  const Tensor& teacher, const Tensor& loss_mask,
                                  bool sequence_sharded, Arena& arena) {
  MT_CHECK(student.dim() == 2 && teacher.shape() == student.shape(),
           "hidden cosine loss: student and teacher rows must be one shape [N, h], got ",
           student.describe(), " and ", teacher.describe());
  const int64_t n = student.size(0), h = student.size(1);
  check_shape(loss_mask, {n}, "hidden cosine loss mask");
  check_dtype(loss_mask, DType::F32, "hidden cosine loss mask");
  ctx.x = as_f32(student, arena);
  ctx.loss_mask = loss_mask;
  ctx.eps = kCosineEpsilon / float(h);
  ctx.gamma = arena.alloc({h}, DType::F32);
  kernels::fill(ctx.gamma, 1.0f);
  ctx.rstd = arena.alloc({n}, DType::F32);
  Tensor x_hat = arena.alloc({n, h}, DType::F32);
  kernels::rmsnorm_forward(ctx.x, ctx.gamma, ctx.eps, x_hat, ctx.rstd);
  ctx.y_hat = arena.alloc({n, h}, DType::F32);
  Tensor y_rstd = arena.alloc({n}, DType::F32);
  kernels::rmsnorm_forward(as_f32(teacher, arena), ctx.gamma, ctx.eps, ctx.y_hat, y_rstd);
  Tensor cos = arena.alloc({n}, DType::F32);  // x̂·ŷ / h per row
  Tensor cos3 = cos.view({n, 1, 1});
  kernels::batched_gemm(x_hat.view({n, 1, h}), false, ctx.y_hat.view({n, 1, h}), true, cos3,
                        1.0f / float(h));
  const kernels::WeightedSum s = kernels::weighted_sum(cos, loss_mask);
  const double loss = s.weights - s.weighted;  // Σ mask · (1 − cos)
  return sequence_sharded && tp.size() > 1 ? tp.all_reduce_scalar(loss) : loss;
}

void hidden_cosine_loss_backward(const HiddenCosineLossCtx& ctx, float coef, Tensor& dstudent,
                                 Arena& arena) {
  check_shape(dstudent, ctx.x.shape(), "hidden cosine loss student gradient");
  const int64_t n = ctx.x.size(0), h = ctx.x.size(1);
  // ∂/∂x̂ = −coef · mask / h · ŷ, row by row.
  Tensor row_scale = arena.alloc({n}, DType::F32);
  kernels::copy(ctx.loss_mask, row_scale);
  kernels::scale(row_scale, -coef / float(h));
  Tensor dx_hat = arena.alloc({n, h}, DType::F32);
  Tensor dx_hat3 = dx_hat.view({n, 1, h});
  kernels::batched_gemm(row_scale.view({n, 1, 1}), false, ctx.y_hat.view({n, 1, h}), false,
                        dx_hat3);
  Tensor dgamma = arena.alloc({h}, DType::F32);  // γ is fixed at 1: discarded
  kernels::fill(dgamma, 0.0f);
  if (dstudent.dtype() == DType::F32) {
    kernels::rmsnorm_backward(dx_hat, ctx.x, ctx.gamma, ctx.rstd, dstudent, dgamma, 1.0f);
    return;
  }
  Tensor dx = arena.alloc({n, h}, DType::F32);
  kernels::rmsnorm_backward(dx_hat, ctx.x, ctx.gamma, ctx.rstd, dx, dgamma);
  Tensor cast = arena.alloc({n, h}, dstudent.dtype());
  kernels::cast(dx, cast);
  kernels::axpy(1.0f, cast, dstudent);
}

}  // namespace megatron
