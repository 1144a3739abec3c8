// Bias + squared ReLU forward/backward on CPU (contract: kernels/squared_relu.h, checked by
// kernels/squared_relu.cpp), on the shared row loops of kernels/cpu/bias_activation_rows.h.
#include "kernels/cpu/bias_activation_rows.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

struct SquaredRelu {
  static float value(float u) {
    const float r = u > 0.f ? u : 0.f;
    return r * r;
  }
  static float grad(float u) { return u > 0.f ? 2.f * u : 0.f; }
};

}  // namespace

void bias_squared_relu_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  dispatch_float(x.dtype(), "bias_squared_relu_forward x", [&](auto tag) {
    using T = decltype(tag);
    bias_activation_forward_rows<SquaredRelu, T>(x.data<T>(), b.data<T>(), y.data<T>(), n, c);
  });
}

void bias_squared_relu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                                Tensor& dbias) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  dispatch_float(x.dtype(), "bias_squared_relu_backward x", [&](auto tag) {
    using T = decltype(tag);
    bias_activation_backward_rows<SquaredRelu, T>(
        dy.data<T>(), x.data<T>(), b.data<T>(), dx.data<T>(),
        dbias.defined() ? dbias.data<float>() : nullptr, n, c);
  });
}

}  // namespace megatron::kernels::cpu
