// RMSNorm forward/backward on CPU (contract: kernels/rmsnorm.h, checked by
// kernels/rmsnorm.cpp). One row per OpenMP iteration, statistics in f32; dγ summed per chunk
// of rows, then over the chunks in order (deterministic, see reduction_chunks).
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

template <typename T>
void forward_rows(const T* x, const float* gamma, float eps, T* y, float* rstd, int64_t n,
                  int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;  // [C]
    T* yr = y + r * c;        // [C]
    float sq = 0.f;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < c; ++j) sq += to_f32(xr[j]) * to_f32(xr[j]);
    const float rs = 1.f / std::sqrt(sq / float(c) + eps);
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) yr[j] = from_f32<T>(to_f32(xr[j]) * rs * gamma[j]);
    rstd[r] = rs;
  }
}

template <typename T>
void backward_rows(const T* dy, const T* x, const float* gamma, const float* rstd, T* dx,
                   float* dgamma, float beta_dx, int64_t n, int64_t c) {
  const int64_t chunks = reduction_chunks(n);
  std::vector<float> partial(size_t(chunks * c), 0.f);  // [chunks, C] Σ dy·x̂
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pg = partial.data() + k * c;
    for (int64_t r = n * k / chunks; r < n * (k + 1) / chunks; ++r) {
      const T* dyr = dy + r * c;
      const T* xr = x + r * c;
      T* dxr = dx + r * c;
      const float rs = rstd[r];
      float sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_gx)
      for (int64_t j = 0; j < c; ++j) {
        const float d = to_f32(dyr[j]);
        const float xh = to_f32(xr[j]) * rs;
        sum_gx += d * gamma[j] * xh;
        pg[j] += d * xh;
      }
      const float mean_gx = sum_gx / float(c);
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const float xh = to_f32(xr[j]) * rs;
        const float v = rs * (to_f32(dyr[j]) * gamma[j] - xh * mean_gx);
        // beta_dx is 0 or 1; a select keeps dx unread when it is 0 (it may hold garbage).
        dxr[j] = from_f32<T>(beta_dx != 0.f ? to_f32(dxr[j]) + v : v);
      }
    }
  }
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t j = 0; j < c; ++j) dgamma[j] += partial[size_t(k * c + j)];
}

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, Tensor& y, Tensor& rstd) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "rmsnorm_forward x", [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(x.data<T>(), gamma.data<float>(), eps, y.data<T>(), rstd.data<float>(), n, c);
  });
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      Tensor& dx, Tensor& dgamma, float beta_dx) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "rmsnorm_backward x", [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dy.data<T>(), x.data<T>(), gamma.data<float>(), rstd.data<float>(),
                     dx.data<T>(), dgamma.data<float>(), beta_dx, n, c);
  });
}

}  // namespace megatron::kernels::cpu
