// Bias + GeLU (erf or tanh form) forward/backward on CUDA (contract: kernels/gelu.h; CPU twin:
// kernels/cpu/gelu.cpp). The tanh form uses the CPU's sigmoid form ½(1 + tanh z) = σ(2z) =
// 1 / (1 + e^{−2z}), z = √(2/π)(u + 0.044715u³), with expf for the CPU's polynomial exp (both
// within a couple of ulp of e^x). The erf form uses CUDA's normcdff for Φ(u), accurate in both
// tails as the CPU's erfc-based Φ is.
//
// The backward writes dx and, when dbias is defined, sums the unrounded dx per column with the
// deterministic column reduction of cuda_rows.cuh, as the CPU sums its f32 g.
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

__device__ __forceinline__ float gelu_sigmoid(float u) {
  const float z = kGeluSqrt2OverPi * (u + kGeluCubic * u * u * u);
  return 1.f / (1.f + expf(-2.f * z));
}

__device__ __forceinline__ float gelu(float u) {
  return u * gelu_sigmoid(u);
}

// gelu'(u) = s + 2·u·s·(1 − s)·√(2/π)·(1 + 3·0.044715·u²), s = σ(2z).
__device__ __forceinline__ float gelu_grad(float u) {
  const float s = gelu_sigmoid(u);
  return s + 2.f * u * s * (1.f - s) * kGeluSqrt2OverPi * (1.f + 3.f * kGeluCubic * u * u);
}

constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // φ(0) = 1/√(2π)

// gelu(u) = u·Φ(u).
__device__ __forceinline__ float gelu_erf(float u) {
  return u * normcdff(u);
}

// gelu'(u) = Φ(u) + u·φ(u), φ(u) = e^{−u²/2}/√(2π).
__device__ __forceinline__ float gelu_erf_grad(float u) {
  return normcdff(u) + u * expf(-0.5f * u * u) * kInvSqrt2Pi;
}

template <GeluForm F>
__device__ __forceinline__ float gelu_of(float u) {
  if constexpr (F == GeluForm::kErf)
    return gelu_erf(u);
  else
    return gelu(u);
}

template <GeluForm F>
__device__ __forceinline__ float gelu_grad_of(float u) {
  if constexpr (F == GeluForm::kErf)
    return gelu_erf_grad(u);
  else
    return gelu_grad(u);
}

template <typename T>
__device__ __forceinline__ float bias_at(const T* bias, int64_t j) {
  return bias ? to_f32(bias[j]) : 0.f;  // no bias: + 0, as the CPU's zero bias
}

template <GeluForm F, typename T>
struct Forward {
  const T* x;
  const T* bias;  // [C] or null
  T* y;
  __device__ void operator()(int64_t, int64_t j, int64_t i) const {
    y[i] = from_f32<T>(gelu_of<F>(to_f32(x[i]) + bias_at(bias, j)));
  }
};

template <GeluForm F, typename T>
struct Backward {
  const T* dy;
  const T* x;
  const T* bias;  // [C] or null
  T* dx;
  __device__ float grad(int64_t j, int64_t i) const {
    const float g = to_f32(dy[i]) * gelu_grad_of<F>(to_f32(x[i]) + bias_at(bias, j));
    dx[i] = from_f32<T>(g);
    return g;
  }
  __device__ void operator()(int64_t, int64_t j, int64_t i) const { grad(j, i); }
  __device__ void operator()(int64_t, int64_t j, int64_t i, float (&v)[1]) const {
    v[0] = grad(j, i);
  }
};

// Runs `body` with the form as a compile-time constant.
template <typename Body>
void with_form(GeluForm form, Body&& body) {
  if (form == GeluForm::kErf)
    body(std::integral_constant<GeluForm, GeluForm::kErf>{});
  else
    body(std::integral_constant<GeluForm, GeluForm::kTanh>{});
}

}  // namespace

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y, GeluForm form) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "bias_gelu_forward x", [&](auto tag) {
    using T = decltype(tag);
    with_form(form, [&](auto f) {
      const Forward<decltype(f)::value, T> op{ptr<T>(x), bias.defined() ? ptr<T>(bias) : nullptr,
                                              ptr<T>(y)};
      launch_rows_cols(op, n, c, "bias_gelu_forward");
    });
  });
}

void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias, GeluForm form) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "bias_gelu_backward x", [&](auto tag) {
    using T = decltype(tag);
    with_form(form, [&](auto f) {
      const Backward<decltype(f)::value, T> op{ptr<T>(dy), ptr<T>(x),
                                               bias.defined() ? ptr<T>(bias) : nullptr, ptr<T>(dx)};
      if (dbias.defined())
        column_sums<1>(op, n, c, ColumnOutputs<1>{{ptr<float>(dbias)}}, x.device(),
                       "bias_gelu_backward");
      else
        launch_rows_cols(op, n, c, "bias_gelu_backward");
    });
  });
}

}  // namespace megatron::kernels::cuda
