// SwiGLU (contract: kernels/swiglu.h): argument checks, then the device's backend.
#include "kernels/swiglu.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

// x [N, 2F] and a [N, F] operand of x's dtype.
void check_pair(const Tensor& x, const Tensor& half, const char* k, const char* half_name) {
  check_float_contiguous(x, k);
  MT_CHECK(x.dim() == 2 && x.size(1) % 2 == 0, k, ": x must be [N, 2F] (gate | up), got ",
           x.describe());
  check_shape(half, {x.size(0), x.size(1) / 2}, half_name);
  check_dtype(half, x.dtype(), half_name);
  check_contiguous(half, half_name);
}

}  // namespace

void swiglu_forward(const Tensor& x, Tensor& y) {
  check_pair(x, y, "swiglu_forward x", "swiglu_forward y");
  const Device device = operand_device("swiglu_forward", {&x, &y});
  MT_DISPATCH(device, swiglu_forward, x, y);
}

void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  check_pair(x, dy, "swiglu_backward x", "swiglu_backward dy");
  check_shape(dx, x.shape(), "swiglu_backward dx");
  check_dtype(dx, x.dtype(), "swiglu_backward dx");
  check_contiguous(dx, "swiglu_backward dx");
  const Device device = operand_device("swiglu_backward", {&dy, &x, &dx});
  MT_DISPATCH(device, swiglu_backward, dy, x, dx);
}

}  // namespace megatron::kernels
