// The row loops of a bias + element-wise activation y = act(x + bias) and its backward
// dx = dy · act'(x + bias), dbias += Σ_rows dx, shared by the activations that fuse a bias
// (kernels/gelu.h, kernels/squared_relu.h). `Act` is a type with static
// `float value(float u)` and `float grad(float u)`, a template argument so that each loop
// stays one straight-line, vectorised body.
//   x, y, dy, dx [N, C] (contiguous, dtype T), bias [C] (dtype T), dbias [C] f32 or null.
#pragma once

#include <vector>

#include "kernels/cpu/cpu_common.h"

namespace megatron::kernels::cpu {

template <typename Act, typename T>
void bias_activation_forward_rows(const T* x, const T* bias, T* y, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;  // [C]
    T* yr = y + r * c;        // [C]
#pragma omp simd
    for (int64_t j = 0; j < c; ++j)
      yr[j] = from_f32<T>(Act::value(to_f32(xr[j]) + to_f32(bias[j])));
  }
}

// dbias partial sums per chunk of rows [chunks, C], summed in chunk order (deterministic).
template <typename Act, typename T>
void bias_activation_backward_rows(const T* dy, const T* x, const T* bias, T* dx, float* dbias,
                                   int64_t n, int64_t c) {
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
        const float g = to_f32(dyr[j]) * Act::grad(to_f32(xr[j]) + to_f32(bias[j]));
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
inline Tensor bias_or_zeros(const Tensor& bias, DType dtype, int64_t c) {
  return bias.defined() ? bias : Tensor::zeros({c}, dtype);
}

}  // namespace megatron::kernels::cpu
