// LayerNorm (contract: kernels/layernorm.h): argument checks, then the device's backend.
#include "kernels/layernorm.h"

#include <initializer_list>

#include "kernels/dispatch.h"

namespace megatron::kernels {

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd) {
  check_float_contiguous(x, "layernorm_forward x");
  MT_CHECK(x.dim() == 2, "layernorm_forward x must be [N, C], got ", x.describe());
  const int64_t n = x.size(0), c = x.size(1);
  MT_CHECK(c > 0, "layernorm_forward x needs C > 0, got ", x.describe());
  check_shape(gamma, {c}, "layernorm_forward gamma");
  check_shape(beta, {c}, "layernorm_forward beta");
  check_dtype(gamma, DType::F32, "layernorm_forward gamma");
  check_dtype(beta, DType::F32, "layernorm_forward beta");
  check_contiguous(gamma, "layernorm_forward gamma");
  check_contiguous(beta, "layernorm_forward beta");
  check_shape(y, {n, c}, "layernorm_forward y");
  check_dtype(y, x.dtype(), "layernorm_forward y");
  check_contiguous(y, "layernorm_forward y");
  for (const Tensor* s : std::initializer_list<const Tensor*>{&mean, &rstd}) {
    check_shape(*s, {n}, "layernorm_forward mean/rstd");
    check_dtype(*s, DType::F32, "layernorm_forward mean/rstd");
    check_contiguous(*s, "layernorm_forward mean/rstd");
  }
  const Device device = operand_device("layernorm_forward", {&x, &gamma, &beta, &y, &mean, &rstd});
  MT_DISPATCH(device, layernorm_forward, x, gamma, beta, eps, y, mean, rstd);
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        float beta_dx) {
  check_float_contiguous(x, "layernorm_backward x");
  MT_CHECK(x.dim() == 2, "layernorm_backward x must be [N, C], got ", x.describe());
  MT_CHECK(beta_dx == 0.f || beta_dx == 1.f, "layernorm_backward beta_dx must be 0 or 1, got ",
           beta_dx);
  const int64_t n = x.size(0), c = x.size(1);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&dy, &dx}) {
    check_shape(*t, {n, c}, "layernorm_backward dy/dx");
    check_dtype(*t, x.dtype(), "layernorm_backward dy/dx");
    check_contiguous(*t, "layernorm_backward dy/dx");
  }
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &dgamma, &dbeta}) {
    check_shape(*t, {c}, "layernorm_backward gamma/dgamma/dbeta");
    check_dtype(*t, DType::F32, "layernorm_backward gamma/dgamma/dbeta");
    check_contiguous(*t, "layernorm_backward gamma/dgamma/dbeta");
  }
  for (const Tensor* t : std::initializer_list<const Tensor*>{&mean, &rstd}) {
    check_shape(*t, {n}, "layernorm_backward mean/rstd");
    check_dtype(*t, DType::F32, "layernorm_backward mean/rstd");
    check_contiguous(*t, "layernorm_backward mean/rstd");
  }
  const Device device =
      operand_device("layernorm_backward", {&dy, &x, &gamma, &mean, &rstd, &dx, &dgamma, &dbeta});
  MT_DISPATCH(device, layernorm_backward, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, beta_dx);
}

}  // namespace megatron::kernels
