// Bias + GeLU (tanh approximation) forward/backward on CPU (contract: kernels/gelu.h, checked
// by kernels/gelu.cpp).
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels::cpu {

namespace {

template <typename T>
void forward_rows(const T* x, const T* bias, T* y, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;  // [C]
    T* yr = y + r * c;        // [C]
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const float u = to_f32(xr[j]) + to_f32(bias[j]);
      yr[j] = from_f32<T>(gelu(u));
    }
  }
}

// dbias partial sums per chunk of rows [chunks, C], summed in chunk order (deterministic).
template <typename T>
void backward_rows(const T* dy, const T* x, const T* bias, T* dx, float* dbias, int64_t n,
                   int64_t c) {
  // Summed even without dbias: a conditional store would stop vectorisation.
  const int64_t chunks = reduction_chunks(n);
  std::vector<float> partial(size_t(chunks * c), 0.f);  // [chunks, C]
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pb = partial.data() + k * c;
    for (int64_t r = n * k / chunks; r < n * (k + 1) / chunks; ++r) {
      const T* dyr = dy + r * c;
      const T* xr = x + r * c;
      T* dxr = dx + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const float u = to_f32(xr[j]) + to_f32(bias[j]);
        const float dgelu = gelu_grad(u);
        const float g = to_f32(dyr[j]) * dgelu;
        dxr[j] = from_f32<T>(g);
        pb[j] += g;
      }
    }
  }
  for (int64_t k = 0; dbias && k < chunks; ++k)
    for (int64_t j = 0; j < c; ++j) dbias[j] += partial[size_t(k * c + j)];
}

// The bias, or zeros [C] when there is none: one loop shape for both (a conditional load per
// element would stop vectorisation).
Tensor bias_or_zeros(const Tensor& bias, DType dtype, int64_t c) {
  return bias.defined() ? bias : Tensor::zeros({c}, dtype);
}

}  // namespace

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  dispatch_float(x.dtype(), "bias_gelu_forward x", [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(x.data<T>(), b.data<T>(), y.data<T>(), n, c);
  });
}

void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  dispatch_float(x.dtype(), "bias_gelu_backward x", [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dy.data<T>(), x.data<T>(), b.data<T>(), dx.data<T>(),
                     dbias.defined() ? dbias.data<float>() : nullptr, n, c);
  });
}

}  // namespace megatron::kernels::cpu
