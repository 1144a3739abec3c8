// The per-row sigmoid gate on CUDA (contract: kernels/sigmoid_gate.h; CPU twin:
// kernels/cpu/sigmoid_gate.cpp). The forward and dy are elementwise (one thread per element);
// the gate's gradient is one thread per row, summing its columns in order as the CPU does.
// The f32 products and sums are rounded one by one (no fused multiply-add), as on the CPU.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace megatron::kernels::cuda {

namespace {

__device__ float gate(float logit) {
  return float(1.0 / (1.0 + exp(-double(logit))));
}

template <typename T>
__global__ void forward_kernel(const T* y, const float* logits, int64_t n, int64_t c, T* out) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * c;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f32<T>(__fadd_rn(to_f32(out[i]), __fmul_rn(gate(logits[i / c]), to_f32(y[i]))));
}

template <typename T>
__global__ void dy_kernel(const T* dout, const float* logits, int64_t n, int64_t c, T* dy) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n * c;
       i += int64_t(gridDim.x) * blockDim.x)
    dy[i] = from_f32<T>(gate(logits[i / c]) * to_f32(dout[i]));
}

template <typename T>
__global__ void dlogits_kernel(const T* dout, const T* y, const float* logits, int64_t n, int64_t c,
                               float* dlogits) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    double dot = 0;
    for (int64_t j = 0; j < c; ++j)
      dot += double(to_f32(dout[r * c + j])) * double(to_f32(y[r * c + j]));
    const double g = gate(logits[r]);
    dlogits[r] = float(dot * g * (1.0 - g));
  }
}

}  // namespace

void sigmoid_gate_forward(const Tensor& y, const Tensor& logits, Tensor& out) {
  const int64_t n = y.size(0), c = y.size(1);
  if (n * c == 0) return;
  dispatch_float(y.dtype(), "sigmoid_gate_forward y", [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<blocks_for(n * c), kThreads, 0, stream()>>>(ptr<T>(y), ptr<float>(logits),
                                                                    n, c, ptr<T>(out));
  });
  megatron::cuda::check_launch("sigmoid_gate_forward");
}

void sigmoid_gate_backward(const Tensor& dout, const Tensor& y, const Tensor& logits, Tensor& dy,
                           Tensor& dlogits) {
  const int64_t n = y.size(0), c = y.size(1);
  if (n == 0) return;
  dispatch_float(y.dtype(), "sigmoid_gate_backward y", [&](auto tag) {
    using T = decltype(tag);
    dlogits_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        ptr<T>(dout), ptr<T>(y), ptr<float>(logits), n, c, ptr<float>(dlogits));
    if (c > 0)
      dy_kernel<T><<<blocks_for(n * c), kThreads, 0, stream()>>>(ptr<T>(dout), ptr<float>(logits),
                                                                 n, c, ptr<T>(dy));
  });
  megatron::cuda::check_launch("sigmoid_gate_backward");
}

}  // namespace megatron::kernels::cuda
