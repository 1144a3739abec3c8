// RMSNorm (contract: kernels/rmsnorm.h): argument checks, then the device's backend.
#include "kernels/rmsnorm.h"

#include <initializer_list>

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

// x [N, C] f32/bf16; gamma [C] f32; rstd [N] f32.
void check_x_gamma_rstd(const Tensor& x, const Tensor& gamma, const Tensor& rstd, const char* k) {
  check_float_contiguous(x, k);
  MT_CHECK(x.dim() == 2 && x.size(1) > 0, k, ": x must be [N, C > 0], got ", x.describe());
  check_shape(gamma, {x.size(1)}, "rmsnorm gamma");
  check_dtype(gamma, DType::F32, "rmsnorm gamma");
  check_contiguous(gamma, "rmsnorm gamma");
  check_shape(rstd, {x.size(0)}, "rmsnorm rstd");
  check_dtype(rstd, DType::F32, "rmsnorm rstd");
  check_contiguous(rstd, "rmsnorm rstd");
}

void check_like_x(const Tensor& t, const Tensor& x, const char* what) {
  check_shape(t, x.shape(), what);
  check_dtype(t, x.dtype(), what);
  check_contiguous(t, what);
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, Tensor& y, Tensor& rstd) {
  check_x_gamma_rstd(x, gamma, rstd, "rmsnorm_forward");
  check_like_x(y, x, "rmsnorm_forward y");
  const Device device = operand_device("rmsnorm_forward", {&x, &gamma, &y, &rstd});
  MT_DISPATCH(device, rmsnorm_forward, x, gamma, eps, y, rstd);
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      Tensor& dx, Tensor& dgamma, float beta_dx) {
  check_x_gamma_rstd(x, gamma, rstd, "rmsnorm_backward");
  MT_CHECK(beta_dx == 0.f || beta_dx == 1.f, "rmsnorm_backward beta_dx must be 0 or 1, got ",
           beta_dx);
  check_like_x(dy, x, "rmsnorm_backward dy");
  check_like_x(dx, x, "rmsnorm_backward dx");
  check_shape(dgamma, {x.size(1)}, "rmsnorm_backward dgamma");
  check_dtype(dgamma, DType::F32, "rmsnorm_backward dgamma");
  check_contiguous(dgamma, "rmsnorm_backward dgamma");
  const Device device = operand_device("rmsnorm_backward", {&dy, &x, &gamma, &rstd, &dx, &dgamma});
  MT_DISPATCH(device, rmsnorm_backward, dy, x, gamma, rstd, dx, dgamma, beta_dx);
}

}  // namespace megatron::kernels
