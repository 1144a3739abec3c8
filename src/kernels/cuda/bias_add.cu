// Bias addition on CUDA (contract: kernels/bias_add.h; CPU twin: kernels/cpu/bias_add.cpp).
// Forward: y[n, c] += bias[c] in place, elementwise. Backward: dbias[c] += Σ_n dy[n, c] by the
// deterministic column reduction of cuda_rows.cuh (fixed chunks of rows, then the chunks in
// order; no atomics): bit-identical from run to run, equal to the CPU's row-order sum to
// rounding.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

template <typename T>
struct AddBias {
  T* y;
  const T* bias;
  __device__ void operator()(int64_t, int64_t j, int64_t i) const {
    y[i] = from_f32<T>(to_f32(y[i]) + to_f32(bias[j]));
  }
};

template <typename T>
struct Column {
  const T* dy;
  __device__ void operator()(int64_t, int64_t, int64_t i, float (&v)[1]) const {
    v[0] = to_f32(dy[i]);
  }
};

}  // namespace

void bias_add_forward(Tensor& y, const Tensor& bias) {
  const int64_t n = y.size(0), c = y.size(1);
  dispatch_float(y.dtype(), "bias_add_forward y", [&](auto tag) {
    using T = decltype(tag);
    launch_rows_cols(AddBias<T>{ptr<T>(y), ptr<T>(bias)}, n, c, "bias_add_forward");
  });
}

void bias_add_backward(const Tensor& dy, Tensor& dbias) {
  const int64_t n = dy.size(0), c = dy.size(1);
  dispatch_float(dy.dtype(), "bias_add_backward dy", [&](auto tag) {
    using T = decltype(tag);
    column_sums<1>(Column<T>{ptr<T>(dy)}, n, c, ColumnOutputs<1>{{ptr<float>(dbias)}}, dy.device(),
                   "bias_add_backward");
  });
}

}  // namespace megatron::kernels::cuda
