// Bias + element-wise activation on CUDA, y = act(x + bias) and its backward
// dx = dy · act'(x + bias), dbias += Σ_rows dx, shared by the activations that fuse a bias
// (kernels/cuda/gelu.cu, kernels/cuda/squared_relu.cu; CPU twin: kernels/cpu/
// bias_activation_rows.h). `Act` is a type with static __device__ `float value(float u)` and
// `float grad(float u)`. The backward sums the unrounded dx per column with the deterministic
// column reduction of cuda_rows.cuh, as the CPU sums its f32 values.
//   x, y, dy, dx [N, C] (contiguous, dtype T), bias [C] (dtype T) or undefined, dbias [C] f32.
#pragma once

#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

template <typename T>
__device__ __forceinline__ float bias_at(const T* bias, int64_t j) {
  return bias ? to_f32(bias[j]) : 0.f;  // no bias: + 0, as the CPU's zero bias
}

template <typename Act, typename T>
struct BiasActivationForward {
  const T* x;
  const T* bias;  // [C] or null
  T* y;
  __device__ void operator()(int64_t, int64_t j, int64_t i) const {
    y[i] = from_f32<T>(Act::value(to_f32(x[i]) + bias_at(bias, j)));
  }
};

template <typename Act, typename T>
struct BiasActivationBackward {
  const T* dy;
  const T* x;
  const T* bias;  // [C] or null
  T* dx;
  __device__ float grad(int64_t j, int64_t i) const {
    const float g = to_f32(dy[i]) * Act::grad(to_f32(x[i]) + bias_at(bias, j));
    dx[i] = from_f32<T>(g);
    return g;
  }
  __device__ void operator()(int64_t, int64_t j, int64_t i) const { grad(j, i); }
  __device__ void operator()(int64_t, int64_t j, int64_t i, float (&v)[1]) const {
    v[0] = grad(j, i);
  }
};

template <typename Act>
void bias_activation_forward(const Tensor& x, const Tensor& bias, Tensor& y, const char* kernel) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    const BiasActivationForward<Act, T> op{ptr<T>(x), bias.defined() ? ptr<T>(bias) : nullptr,
                                           ptr<T>(y)};
    launch_rows_cols(op, n, c, kernel);
  });
}

template <typename Act>
void bias_activation_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                              Tensor& dbias, const char* kernel) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), kernel, [&](auto tag) {
    using T = decltype(tag);
    const BiasActivationBackward<Act, T> op{ptr<T>(dy), ptr<T>(x),
                                            bias.defined() ? ptr<T>(bias) : nullptr, ptr<T>(dx)};
    if (dbias.defined())
      column_sums<1>(op, n, c, ColumnOutputs<1>{{ptr<float>(dbias)}}, x.device(), kernel);
    else
      launch_rows_cols(op, n, c, kernel);
  });
}

}  // namespace megatron::kernels::cuda
