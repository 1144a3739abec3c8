// Bias addition (contract: kernels/bias_add.h): argument checks, then the device's backend.
#include "kernels/bias_add.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

void bias_add_forward(Tensor& y, const Tensor& bias) {
  check_float_contiguous(y, "bias_add_forward y");
  MT_CHECK(y.dim() == 2, "bias_add_forward y must be [N, C], got ", y.describe());
  const int64_t c = y.size(1);
  check_shape(bias, {c}, "bias_add_forward bias");
  check_dtype(bias, y.dtype(), "bias_add_forward bias");
  check_contiguous(bias, "bias_add_forward bias");
  const Device device = operand_device("bias_add_forward", {&y, &bias});
  MT_DISPATCH(device, bias_add_forward, y, bias);
}

void bias_add_backward(const Tensor& dy, Tensor& dbias) {
  check_float_contiguous(dy, "bias_add_backward dy");
  MT_CHECK(dy.dim() == 2, "bias_add_backward dy must be [N, C], got ", dy.describe());
  const int64_t c = dy.size(1);
  check_shape(dbias, {c}, "bias_add_backward dbias");
  check_dtype(dbias, DType::F32, "bias_add_backward dbias");
  check_contiguous(dbias, "bias_add_backward dbias");
  const Device device = operand_device("bias_add_backward", {&dy, &dbias});
  MT_DISPATCH(device, bias_add_backward, dy, dbias);
}

}  // namespace megatron::kernels
