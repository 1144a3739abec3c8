// LayerNorm forward/backward on CPU (contract: kernels/layernorm.h, checked by
// kernels/layernorm.cpp). One row per OpenMP iteration; statistics in f32 with a two-pass
// variance (mean first), which stays accurate when |mean| >> std, unlike E[x²] − E[x]².
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

template <typename T>
void forward_rows(const T* x, const float* gamma, const float* beta, float eps, T* y, float* mean,
                  float* rstd, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;  // [C]
    T* yr = y + r * c;        // [C]
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < c; ++j) sum += to_f32(xr[j]);
    const float mu = sum / float(c);
    float sq = 0.f;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < c; ++j) {
      float d = to_f32(xr[j]) - mu;
      sq += d * d;
    }
    const float rs = 1.f / std::sqrt(sq / float(c) + eps);
#pragma omp simd
    for (int64_t j = 0; j < c; ++j)
      yr[j] = from_f32<T>((to_f32(xr[j]) - mu) * rs * gamma[j] + beta[j]);
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) with g = dy · γ and x̂ = (x − μ) · rstd.
// dγ and dβ are summed per chunk of rows into `partial` [chunks, 2, C], then over chunks in
// order (deterministic, see reduction_chunks).
template <typename T>
void backward_rows(const T* dy, const T* x, const float* gamma, const float* mean,
                   const float* rstd, T* dx, float* dgamma, float* dbeta, float beta_dx, int64_t n,
                   int64_t c) {
  const int64_t chunks = reduction_chunks(n);
  std::vector<float> partial(size_t(chunks * 2 * c), 0.f);  // [chunks, 2, C]
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pg = partial.data() + k * 2 * c;  // [C] Σ dy·x̂
    float* pb = pg + c;                      // [C] Σ dy
    for (int64_t r = n * k / chunks; r < n * (k + 1) / chunks; ++r) {
      const T* dyr = dy + r * c;
      const T* xr = x + r * c;
      T* dxr = dx + r * c;
      const float mu = mean[r], rs = rstd[r];
      float sum_g = 0.f, sum_gx = 0.f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t j = 0; j < c; ++j) {
        const float d = to_f32(dyr[j]);
        const float xh = (to_f32(xr[j]) - mu) * rs;
        const float g = d * gamma[j];
        sum_g += g;
        sum_gx += g * xh;
        pg[j] += d * xh;
        pb[j] += d;
      }
      const float mean_g = sum_g / float(c), mean_gx = sum_gx / float(c);
      if (beta_dx == 0.f) {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const float xh = (to_f32(xr[j]) - mu) * rs;
          const float g = to_f32(dyr[j]) * gamma[j];
          dxr[j] = from_f32<T>(rs * (g - mean_g - xh * mean_gx));
        }
      } else {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const float xh = (to_f32(xr[j]) - mu) * rs;
          const float g = to_f32(dyr[j]) * gamma[j];
          dxr[j] = from_f32<T>(beta_dx * to_f32(dxr[j]) + rs * (g - mean_g - xh * mean_gx));
        }
      }
    }
  }
  for (int64_t k = 0; k < chunks; ++k) {
    const float* pg = partial.data() + k * 2 * c;
    const float* pb = pg + c;
    for (int64_t j = 0; j < c; ++j) {
      dgamma[j] += pg[j];
      dbeta[j] += pb[j];
    }
  }
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "layernorm_forward x", [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(x.data<T>(), gamma.data<float>(), beta.data<float>(), eps, y.data<T>(),
                    mean.data<float>(), rstd.data<float>(), n, c);
  });
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        float beta_dx) {
  const int64_t n = x.size(0), c = x.size(1);
  dispatch_float(x.dtype(), "layernorm_backward x", [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dy.data<T>(), x.data<T>(), gamma.data<float>(), mean.data<float>(),
                     rstd.data<float>(), dx.data<T>(), dgamma.data<float>(), dbeta.data<float>(),
                     beta_dx, n, c);
  });
}

}  // namespace megatron::kernels::cpu
