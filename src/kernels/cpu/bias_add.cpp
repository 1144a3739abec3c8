// Bias addition on CPU (contract: kernels/bias_add.h). Forward parallelises over rows,
// backward over columns, so each column's sum runs in row order on one thread whatever the
// thread count (bit-identical from run to run).
#include "kernels/bias_add.h"

#include "kernels/cpu/cpu_common.h"

namespace megatron::kernels {

void bias_add_forward(Tensor& y, const Tensor& bias) {
  cpu::require_cpu("bias_add_forward", {&y, &bias});
  cpu::check_float_contiguous(y, "bias_add_forward y");
  MT_CHECK(y.dim() == 2, "bias_add_forward y must be [N, C], got ", y.describe());
  const int64_t n = y.size(0), c = y.size(1);
  check_shape(bias, {c}, "bias_add_forward bias");
  check_dtype(bias, y.dtype(), "bias_add_forward bias");
  cpu::dispatch_float(y.dtype(), "bias_add_forward y", [&](auto tag) {
    using T = decltype(tag);
    T* yp = y.data<T>();          // [N, C]
    const T* b = bias.data<T>();  // [C]
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      T* yr = yp + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j)
        yr[j] = cpu::from_f32<T>(cpu::to_f32(yr[j]) + cpu::to_f32(b[j]));
    }
  });
}

void bias_add_backward(const Tensor& dy, Tensor& dbias) {
  cpu::require_cpu("bias_add_backward", {&dy, &dbias});
  cpu::check_float_contiguous(dy, "bias_add_backward dy");
  MT_CHECK(dy.dim() == 2, "bias_add_backward dy must be [N, C], got ", dy.describe());
  const int64_t n = dy.size(0), c = dy.size(1);
  check_shape(dbias, {c}, "bias_add_backward dbias");
  check_dtype(dbias, DType::F32, "bias_add_backward dbias");
  check_contiguous(dbias, "bias_add_backward dbias");
  cpu::dispatch_float(dy.dtype(), "bias_add_backward dy", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();        // [N, C]
    float* db = dbias.data<float>();  // [C]
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < c; ++j) {
      float s = 0.f;
      for (int64_t r = 0; r < n; ++r) s += cpu::to_f32(g[r * c + j]);
      db[j] += s;
    }
  });
}

}  // namespace megatron::kernels
