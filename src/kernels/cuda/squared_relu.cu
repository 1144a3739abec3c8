// Bias + squared ReLU forward/backward on CUDA (contract: kernels/squared_relu.h; CPU twin:
// kernels/cpu/squared_relu.cpp), on the shared loops of kernels/cuda/bias_activation.cuh.
#include "kernels/cuda/bias_activation.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace megatron::kernels::cuda {

namespace {

struct SquaredRelu {
  __device__ static float value(float u) {
    const float r = u > 0.f ? u : 0.f;
    return r * r;
  }
  __device__ static float grad(float u) { return u > 0.f ? 2.f * u : 0.f; }
};

}  // namespace

void bias_squared_relu_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  bias_activation_forward<SquaredRelu>(x, bias, y, "bias_squared_relu_forward");
}

void bias_squared_relu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                                Tensor& dbias) {
  bias_activation_backward<SquaredRelu>(dy, x, bias, dx, dbias, "bias_squared_relu_backward");
}

}  // namespace megatron::kernels::cuda
