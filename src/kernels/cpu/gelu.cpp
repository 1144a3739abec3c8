// Bias + GeLU (erf or tanh form) forward/backward on CPU (contract: kernels/gelu.h, checked by
// kernels/gelu.cpp). The form is a template argument so that each loop stays one straight-line,
// vectorised body.
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels::cpu {

namespace {

template <GeluForm F>
inline float gelu_of(float u) {
  if constexpr (F == GeluForm::kErf)
    return gelu_erf(u);
  else
    return gelu(u);
}

template <GeluForm F>
inline float gelu_grad_of(float u) {
  if constexpr (F == GeluForm::kErf)
    return gelu_erf_grad(u);
  else
    return gelu_grad(u);
}

template <GeluForm F, typename T>
void forward_rows(const T* x, const T* bias, T* y, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;  // [C]
    T* yr = y + r * c;        // [C]
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const float u = to_f32(xr[j]) + to_f32(bias[j]);
      yr[j] = from_f32<T>(gelu_of<F>(u));
    }
  }
}

// dbias partial sums per chunk of rows [chunks, C], summed in chunk order (deterministic).
template <GeluForm F, typename T>
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
        const float g = to_f32(dyr[j]) * gelu_grad_of<F>(u);
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

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y, GeluForm form) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  dispatch_float(x.dtype(), "bias_gelu_forward x", [&](auto tag) {
    using T = decltype(tag);
    auto run =
        form == GeluForm::kErf ? forward_rows<GeluForm::kErf, T> : forward_rows<GeluForm::kTanh, T>;
    run(x.data<T>(), b.data<T>(), y.data<T>(), n, c);
  });
}

void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias, GeluForm form) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  dispatch_float(x.dtype(), "bias_gelu_backward x", [&](auto tag) {
    using T = decltype(tag);
    auto run = form == GeluForm::kErf ? backward_rows<GeluForm::kErf, T>
                                      : backward_rows<GeluForm::kTanh, T>;
    run(dy.data<T>(), x.data<T>(), b.data<T>(), dx.data<T>(),
        dbias.defined() ? dbias.data<float>() : nullptr, n, c);
  });
}

}  // namespace megatron::kernels::cpu
