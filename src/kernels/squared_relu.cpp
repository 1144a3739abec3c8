// Bias + squared ReLU (contract: kernels/squared_relu.h): argument checks, then the device's
// backend.
#include "kernels/squared_relu.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

void bias_squared_relu_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  check_bias_activation("bias_squared_relu_forward", x, bias, {&y});
  const Device device = operand_device("bias_squared_relu_forward", {&x, &bias, &y});
  MT_DISPATCH(device, bias_squared_relu_forward, x, bias, y);
}

void bias_squared_relu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                                Tensor& dbias) {
  check_bias_activation("bias_squared_relu_backward", x, bias, {&dy, &dx}, &dbias);
  const Device device = operand_device("bias_squared_relu_backward", {&dy, &x, &bias, &dx, &dbias});
  MT_DISPATCH(device, bias_squared_relu_backward, dy, x, bias, dx, dbias);
}

}  // namespace megatron::kernels
