// Bias + squared ReLU (contract: kernels/squared_relu.h): argument checks, then the device's
// backend.
#include "kernels/squared_relu.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

void bias_squared_relu_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  check_bias_activation({&x, "bias_squared_relu_forward x"},
                        {&bias, "bias_squared_relu_forward bias"},
                        {{&y, "bias_squared_relu_forward y"}});
  const Device device = operand_device("bias_squared_relu_forward", {&x, &bias, &y});
  MT_DISPATCH(device, bias_squared_relu_forward, x, bias, y);
}

void bias_squared_relu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                                Tensor& dbias) {
  check_bias_activation(
      {&x, "bias_squared_relu_backward x"}, {&bias, "bias_squared_relu_backward bias"},
      {{&dy, "bias_squared_relu_backward dy"}, {&dx, "bias_squared_relu_backward dx"}},
      {&dbias, "bias_squared_relu_backward dbias"});
  const Device device = operand_device("bias_squared_relu_backward", {&dy, &x, &bias, &dx, &dbias});
  MT_DISPATCH(device, bias_squared_relu_backward, dy, x, bias, dx, dbias);
}

}  // namespace megatron::kernels
