// Bias + tanh (contract: kernels/bias_tanh.h): argument checks, then the device's backend.
#include "kernels/bias_tanh.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

void check_rows(const Tensor& t, const Tensor& like, const char* what) {
  MT_CHECK(t.defined(), what, " must be a defined tensor");
  MT_CHECK(t.is_contiguous(), what, " must be contiguous, got ", t.describe());
  check_shape(t, like.shape(), what);
  check_dtype(t, like.dtype(), what);
}

void check_float_rows(const Tensor& t, const char* what) {
  MT_CHECK(t.defined() && t.dim() == 2 && t.is_contiguous(), what,
           " must be a contiguous [N, C] tensor, got ", t.describe());
  MT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16, what, " has dtype ",
           dtype_name(t.dtype()), ", expected f32 or bf16");
}

}  // namespace

void bias_tanh_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  check_float_rows(x, "bias_tanh_forward: x");
  check_rows(y, x, "bias_tanh_forward: y");
  if (bias.defined()) {
    check_shape(bias, {x.size(1)}, "bias_tanh_forward: bias");
    check_dtype(bias, x.dtype(), "bias_tanh_forward: bias");
    check_contiguous(bias, "bias_tanh_forward: bias");
  }
  const Device device = operand_device("bias_tanh_forward", {&x, &bias, &y});
  MT_DISPATCH(device, bias_tanh_forward, x, bias, y);
}

void bias_tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias) {
  check_float_rows(y, "bias_tanh_backward: y");
  check_rows(dy, y, "bias_tanh_backward: dy");
  check_rows(dx, y, "bias_tanh_backward: dx");
  if (dbias.defined()) {
    check_shape(dbias, {y.size(1)}, "bias_tanh_backward: dbias");
    check_dtype(dbias, DType::F32, "bias_tanh_backward: dbias");
    check_contiguous(dbias, "bias_tanh_backward: dbias");
  }
  const Device device = operand_device("bias_tanh_backward", {&dy, &y, &dx, &dbias});
  MT_DISPATCH(device, bias_tanh_backward, dy, y, dx, dbias);
}

}  // namespace megatron::kernels
