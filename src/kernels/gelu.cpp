// Bias + GeLU (contract: kernels/gelu.h): argument checks, then the device's backend.
#include "kernels/gelu.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

const char* gelu_form_name(GeluForm form) {
  return form == GeluForm::kErf ? "erf" : "tanh";
}

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y, GeluForm form) {
  check_bias_activation({&x, "bias_gelu_forward x"}, {&bias, "bias_gelu_forward bias"},
                        {{&y, "bias_gelu_forward y"}});
  const Device device = operand_device("bias_gelu_forward", {&x, &bias, &y});
  MT_DISPATCH(device, bias_gelu_forward, x, bias, y, form);
}

void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias, GeluForm form) {
  check_bias_activation({&x, "bias_gelu_backward x"}, {&bias, "bias_gelu_backward bias"},
                        {{&dy, "bias_gelu_backward dy"}, {&dx, "bias_gelu_backward dx"}},
                        {&dbias, "bias_gelu_backward dbias"});
  const Device device = operand_device("bias_gelu_backward", {&dy, &x, &bias, &dx, &dbias});
  MT_DISPATCH(device, bias_gelu_backward, dy, x, bias, dx, dbias, form);
}

}  // namespace megatron::kernels
