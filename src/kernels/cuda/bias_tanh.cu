// Bias + tanh (BERT's pooler activation) on CUDA (contract: kernels/bias_tanh.h; CPU twin:
// kernels/cpu/bias_tanh.cpp). y = tanh(x + bias), y may alias x; dx = dy · (1 − y²), dx may
// alias dy (each element is read and then written by one thread). As on the CPU, dbias sums the
// STORED dx (rounded to the activation dtype), here by the deterministic column reduction of
// cuda_rows.cuh.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

template <typename T>
struct Forward {
  const T* x;
  const T* bias;  // [C] or null
  T* y;
  __device__ void operator()(int64_t, int64_t j, int64_t i) const {
    y[i] = from_f32<T>(tanhf(to_f32(x[i]) + (bias ? to_f32(bias[j]) : 0.f)));
  }
};

template <typename T>
struct Backward {
  const T* dy;
  const T* y;
  T* dx;
  __device__ float grad(int64_t i) const {
    const float t = to_f32(y[i]);
    const T g = from_f32<T>(to_f32(dy[i]) * (1.f - t * t));
    dx[i] = g;
    return to_f32(g);
  }
  __device__ void operator()(int64_t i) const { grad(i); }
  __device__ void operator()(int64_t, int64_t, int64_t i, float (&v)[1]) const { v[0] = grad(i); }
};

}  // namespace

void bias_tanh_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "bias_tanh_forward x", [&](auto tag) {
    using T = decltype(tag);
    const Forward<T> op{ptr<T>(x), bias.defined() ? ptr<T>(bias) : nullptr, ptr<T>(y)};
    launch_rows_cols(op, n, c, "bias_tanh_forward");
  });
}

void bias_tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias) {
  const int64_t n = y.size(0), c = y.size(1);
  dispatch_float(y.dtype(), "bias_tanh_backward y", [&](auto tag) {
    using T = decltype(tag);
    const Backward<T> op{ptr<T>(dy), ptr<T>(y), ptr<T>(dx)};
    if (dbias.defined())
      column_sums<1>(op, n, c, ColumnOutputs<1>{{ptr<float>(dbias)}}, y.device(),
                     "bias_tanh_backward");
    else
      launch_flat(op, n * c, "bias_tanh_backward");
  });
}

}  // namespace megatron::kernels::cuda
