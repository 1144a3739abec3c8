// Bias + GeLU (contract: kernels/gelu.h): argument checks, then the device's backend.
#include "kernels/gelu.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

// Checks x [N, C] and an optional bias [C] of x's dtype.
void check_x_bias(const Tensor& x, const Tensor& bias, const char* k) {
  check_float_contiguous(x, k);
  MT_CHECK(x.dim() == 2, k, ": x must be [N, C], got ", x.describe());
  if (bias.defined()) {
    check_shape(bias, {x.size(1)}, "bias_gelu bias");
    check_dtype(bias, x.dtype(), "bias_gelu bias");
    check_contiguous(bias, "bias_gelu bias");
  }
}

void check_like_x(const Tensor& t, const Tensor& x, const char* what) {
  check_shape(t, x.shape(), what);
  check_dtype(t, x.dtype(), what);
  check_contiguous(t, what);
}

}  // namespace

const char* gelu_form_name(GeluForm form) {
  return form == GeluForm::kErf ? "erf" : "tanh";
}

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y, GeluForm form) {
  check_x_bias(x, bias, "bias_gelu_forward x");
  check_like_x(y, x, "bias_gelu_forward y");
  const Device device = operand_device("bias_gelu_forward", {&x, &bias, &y});
  MT_DISPATCH(device, bias_gelu_forward, x, bias, y, form);
}

void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias, GeluForm form) {
  check_x_bias(x, bias, "bias_gelu_backward x");
  check_like_x(dy, x, "bias_gelu_backward dy");
  check_like_x(dx, x, "bias_gelu_backward dx");
  if (dbias.defined()) {
    check_shape(dbias, {x.size(1)}, "bias_gelu_backward dbias");
    check_dtype(dbias, DType::F32, "bias_gelu_backward dbias");
    check_contiguous(dbias, "bias_gelu_backward dbias");
  }
  const Device device = operand_device("bias_gelu_backward", {&dy, &x, &bias, &dx, &dbias});
  MT_DISPATCH(device, bias_gelu_backward, dy, x, bias, dx, dbias, form);
}

}  // namespace megatron::kernels
