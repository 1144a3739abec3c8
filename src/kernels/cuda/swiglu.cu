// SwiGLU forward/backward on CUDA (contract: kernels/swiglu.h; CPU twin:
// kernels/cpu/swiglu.cpp): one thread per output element (row, j), σ(a) = 1 / (1 + e^{−a})
// with expf for the CPU's polynomial exp (both within a couple of ulp of e^x).
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

__device__ __forceinline__ float sigmoid(float a) {
  return 1.f / (1.f + expf(-a));
}

template <typename T>
struct Forward {
  const T* x;  // [N, 2F]
  T* y;        // [N, F]
  int64_t f;
  __device__ void operator()(int64_t r, int64_t j, int64_t i) const {
    const float a = to_f32(x[r * 2 * f + j]);
    y[i] = from_f32<T>(a * sigmoid(a) * to_f32(x[r * 2 * f + f + j]));
  }
};

template <typename T>
struct Backward {
  const T* dy;  // [N, F]
  const T* x;   // [N, 2F]
  T* dx;        // [N, 2F]
  int64_t f;
  __device__ void operator()(int64_t r, int64_t j, int64_t i) const {
    const int64_t gate = r * 2 * f + j, up = gate + f;
    const float a = to_f32(x[gate]), g = to_f32(dy[i]);
    const float s = sigmoid(a);
    dx[gate] = from_f32<T>(g * to_f32(x[up]) * s * (1.f + a * (1.f - s)));
    dx[up] = from_f32<T>(g * a * s);
  }
};

}  // namespace

void swiglu_forward(const Tensor& x, Tensor& y) {
  const int64_t n = x.size(0), f = x.size(1) / 2;
  dispatch_float(x.dtype(), "swiglu_forward x", [&](auto tag) {
    using T = decltype(tag);
    launch_rows_cols(Forward<T>{ptr<T>(x), ptr<T>(y), f}, n, f, "swiglu_forward");
  });
}

void swiglu_backward(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t n = x.size(0), f = x.size(1) / 2;
  dispatch_float(x.dtype(), "swiglu_backward x", [&](auto tag) {
    using T = decltype(tag);
    launch_rows_cols(Backward<T>{ptr<T>(dy), ptr<T>(x), ptr<T>(dx), f}, n, f, "swiglu_backward");
  });
}

}  // namespace megatron::kernels::cuda
