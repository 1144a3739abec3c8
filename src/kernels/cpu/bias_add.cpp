// Bias addition on CPU (contract: kernels/bias_add.h, checked by kernels/bias_add.cpp).
// Forward parallelises over rows, backward over columns, so each column's sum runs in row
// order on one thread whatever the thread count (bit-identical from run to run).
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

void bias_add_forward(Tensor& y, const Tensor& bias) {
  const int64_t n = y.size(0), c = y.size(1);
  dispatch_float(y.dtype(), "bias_add_forward y", [&](auto tag) {
    using T = decltype(tag);
    T* yp = y.data<T>();          // [N, C]
    const T* b = bias.data<T>();  // [C]
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      T* yr = yp + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) yr[j] = from_f32<T>(to_f32(yr[j]) + to_f32(b[j]));
    }
  });
}

void bias_add_backward(const Tensor& dy, Tensor& dbias) {
  const int64_t n = dy.size(0), c = dy.size(1);
  dispatch_float(dy.dtype(), "bias_add_backward dy", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();        // [N, C]
    float* db = dbias.data<float>();  // [C]
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < c; ++j) {
      float s = 0.f;
      for (int64_t r = 0; r < n; ++r) s += to_f32(g[r * c + j]);
      db[j] += s;
    }
  });
}

}  // namespace megatron::kernels::cpu
