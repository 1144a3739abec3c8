// Bias + GeLU (erf or tanh form) forward/backward on CPU (contract: kernels/gelu.h, checked by
// kernels/gelu.cpp), on the shared row loops of kernels/cpu/bias_activation_rows.h.
#include "kernels/cpu/bias_activation_rows.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels::cpu {

namespace {

struct GeluErf {
  static float value(float u) { return gelu_erf(u); }
  static float grad(float u) { return gelu_erf_grad(u); }
};

struct GeluTanh {
  static float value(float u) { return gelu(u); }
  static float grad(float u) { return gelu_grad(u); }
};

}  // namespace

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y, GeluForm form) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  dispatch_float(x.dtype(), "bias_gelu_forward x", [&](auto tag) {
    using T = decltype(tag);
    auto run = form == GeluForm::kErf ? bias_activation_forward_rows<GeluErf, T>
                                      : bias_activation_forward_rows<GeluTanh, T>;
    run(x.data<T>(), b.data<T>(), y.data<T>(), n, c);
  });
}

void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias, GeluForm form) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  dispatch_float(x.dtype(), "bias_gelu_backward x", [&](auto tag) {
    using T = decltype(tag);
    auto run = form == GeluForm::kErf ? bias_activation_backward_rows<GeluErf, T>
                                      : bias_activation_backward_rows<GeluTanh, T>;
    run(dy.data<T>(), x.data<T>(), b.data<T>(), dx.data<T>(),
        dbias.defined() ? dbias.data<float>() : nullptr, n, c);
  });
}

}  // namespace megatron::kernels::cpu
