// Bias + GeLU (erf or tanh form) forward/backward on CUDA (contract: kernels/gelu.h; CPU twin:
// kernels/cpu/gelu.cpp). The tanh form uses the CPU's sigmoid form ½(1 + tanh z) = σ(2z) =
// 1 / (1 + e^{−2z}), z = √(2/π)(u + 0.044715u³), with expf for the CPU's polynomial exp (both
// within a couple of ulp of e^x). The erf form uses CUDA's normcdff for Φ(u), accurate in both
// tails as the CPU's erfc-based Φ is.
//
// The row loops and the deterministic dbias reduction are kernels/cuda/bias_activation.cuh's.
#include "kernels/cuda/bias_activation.cuh"
#include "kernels/cuda/cuda_kernels.h"

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

struct GeluErf {
  __device__ static float value(float u) { return gelu_erf(u); }
  __device__ static float grad(float u) { return gelu_erf_grad(u); }
};

struct GeluTanh {
  __device__ static float value(float u) { return gelu(u); }
  __device__ static float grad(float u) { return gelu_grad(u); }
};

}  // namespace

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y, GeluForm form) {
  if (form == GeluForm::kErf)
    bias_activation_forward<GeluErf>(x, bias, y, "bias_gelu_forward");
  else
    bias_activation_forward<GeluTanh>(x, bias, y, "bias_gelu_forward");
}

void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias, GeluForm form) {
  if (form == GeluForm::kErf)
    bias_activation_backward<GeluErf>(dy, x, bias, dx, dbias, "bias_gelu_backward");
  else
    bias_activation_backward<GeluTanh>(dy, x, bias, dx, dbias, "bias_gelu_backward");
}

}  // namespace megatron::kernels::cuda
