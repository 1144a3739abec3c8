// SwiGLU forward/backward on CPU (contract: kernels/swiglu.h, checked by kernels/swiglu.cpp).
// σ(a) = 1 / (1 + e^{−a}) with vector_math.h's exp, so the loops vectorise.
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels::cpu {

namespace {

inline float sigmoid(float a) {
  return 1.f / (1.f + exp_approx(-a));
}

template <typename T>
void forward_rows(const T* x, T* y, int64_t n, int64_t f) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* gate = x + r * 2 * f;  // [F]
    const T* up = gate + f;         // [F]
    T* yr = y + r * f;
#pragma omp simd
    for (int64_t j = 0; j < f; ++j) {
      const float a = to_f32(gate[j]);
      yr[j] = from_f32<T>(a * sigmoid(a) * to_f32(up[j]));
    }
  }
}

template <typename T>
void backward_rows(const T* dy, const T* x, T* dx, int64_t n, int64_t f) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* gate = x + r * 2 * f;
    const T* up = gate + f;
    const T* dyr = dy + r * f;
    T* dgate = dx + r * 2 * f;
    T* dup = dgate + f;
#pragma omp simd
    for (int64_t j = 0; j < f; ++j) {
      const float a = to_f32(gate[j]), g = to_f32(dyr[j]);
      const float s = sigmoid(a);
      dgate[j] = from_f32<T>(g * to_f32(up[j]) * s * (1.f + a * (1.f - s)));
      dup[j] = from_f32<T>(g * a * s);
    }
  }
}

}  // namespace

void swiglu_forward(const Tensor& x, Tensor& y) {
  const int64_t n = x.size(0), f = x.size(1) / 2;
  dispatch_float(x.dtype(), "swiglu_forward x", [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(x.data<T>(), y.data<T>(), n, f);
  });
}

void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t n = x.size(0), f = x.size(1) / 2;
  dispatch_float(x.dtype(), "swiglu_backward x", [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dy.data<T>(), x.data<T>(), dx.data<T>(), n, f);
  });
}

}  // namespace megatron::kernels::cpu
