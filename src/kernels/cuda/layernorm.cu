// LayerNorm forward/backward on CUDA (contract: kernels/layernorm.h; CPU twin:
// kernels/cpu/layernorm.cpp). Statistics in f32 with the CPU's two-pass variance (mean first).
//
// Forward: one warp or block per row (cuda_rows.cuh), three passes over the row (sum, squared
// deviations, output), each a fixed-order reduction.
// Backward: dx by the same row kernel (Σ g and Σ g·x̂ per row, then dx); dγ = Σ_rows dy·x̂ and
// dβ = Σ_rows dy by the deterministic column reduction of cuda_rows.cuh (per-chunk partial sums
// in a fixed layout, then the chunks in order, added (+=) to dgamma/dbeta). No atomics.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

template <typename T, bool kWarp>
__global__ void __launch_bounds__(512)
    forward_kernel(const T* x, const float* gamma, const float* beta, float eps, T* y, float* mean,
                   float* rstd, int64_t n, int64_t c) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < n; r += G::stride()) {
    const T* xr = x + r * c;  // [C]
    T* yr = y + r * c;        // [C]
    float sum = 0.f;
    for (int64_t j = G::lane(); j < c; j += G::width()) sum += to_f32(xr[j]);
    const float mu = G::sum(sum, smem) / float(c);
    float sq = 0.f;
    for (int64_t j = G::lane(); j < c; j += G::width()) {
      const float d = to_f32(xr[j]) - mu;
      sq += d * d;
    }
    const float rs = 1.f / sqrtf(G::sum(sq, smem) / float(c) + eps);
    for (int64_t j = G::lane(); j < c; j += G::width())
      yr[j] = from_f32<T>((to_f32(xr[j]) - mu) * rs * gamma[j] + beta[j]);
    if (G::lane() == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)), g = dy · γ, x̂ = (x − μ) · rstd; written when
// kAccumulate is false (dx is not read: it may hold garbage), else added to dx (beta_dx = 1).
template <typename T, bool kWarp, bool kAccumulate>
__global__ void __launch_bounds__(512)
    backward_dx_kernel(const T* dy, const T* x, const float* gamma, const float* mean,
                       const float* rstd, T* dx, int64_t n, int64_t c) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < n; r += G::stride()) {
    const T* dyr = dy + r * c;
    const T* xr = x + r * c;
    T* dxr = dx + r * c;
    const float mu = mean[r], rs = rstd[r];
    float sum_g = 0.f, sum_gx = 0.f;
    for (int64_t j = G::lane(); j < c; j += G::width()) {
      const float xh = (to_f32(xr[j]) - mu) * rs;
      const float g = to_f32(dyr[j]) * gamma[j];
      sum_g += g;
      sum_gx += g * xh;
    }
    const float mean_g = G::sum(sum_g, smem) / float(c);
    const float mean_gx = G::sum(sum_gx, smem) / float(c);
    for (int64_t j = G::lane(); j < c; j += G::width()) {
      const float xh = (to_f32(xr[j]) - mu) * rs;
      const float g = to_f32(dyr[j]) * gamma[j];
      const float v = rs * (g - mean_g - xh * mean_gx);
      if constexpr (kAccumulate)
        dxr[j] = from_f32<T>(to_f32(dxr[j]) + v);
      else
        dxr[j] = from_f32<T>(v);
    }
  }
}

// Column terms of the parameter gradients: v = {dy·x̂, dy}.
template <typename T>
struct GammaBetaTerms {
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  __device__ void operator()(int64_t r, int64_t, int64_t i, float (&v)[2]) const {
    const float d = to_f32(dy[i]);
    v[0] = d * ((to_f32(x[i]) - mean[r]) * rstd[r]);
    v[1] = d;
  }
};

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0 || c == 0) return;
  const RowLaunch L = row_launch(n, c);
  dispatch_float(x.dtype(), "layernorm_forward x", [&](auto tag) {
    using T = decltype(tag);
    with_row_mode(L, [&](auto warp) {
      forward_kernel<T, decltype(warp)::value>
          <<<L.grid, L.block, 0, stream()>>>(ptr<T>(x), ptr<float>(gamma), ptr<float>(beta), eps,
                                             ptr<T>(y), ptr<float>(mean), ptr<float>(rstd), n, c);
    });
  });
  ::megatron::cuda::check_launch("layernorm_forward");
}

void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        float beta_dx) {
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0 || c == 0) return;
  const RowLaunch L = row_launch(n, c);
  const bool accumulate = beta_dx != 0.f;  // validated: 0 or 1
  dispatch_float(x.dtype(), "layernorm_backward x", [&](auto tag) {
    using T = decltype(tag);
    // The column sums go first: they read dy and x, which dx may alias (the dx kernel reads
    // each row whole before it writes any of it).
    const GammaBetaTerms<T> terms{ptr<T>(dy), ptr<T>(x), ptr<float>(mean), ptr<float>(rstd)};
    column_sums<2>(terms, n, c, ColumnOutputs<2>{{ptr<float>(dgamma), ptr<float>(dbeta)}},
                   x.device(), "layernorm_backward dgamma/dbeta");
    with_row_mode(L, [&](auto warp) {
      constexpr bool kWarp = decltype(warp)::value;
      if (accumulate)
        backward_dx_kernel<T, kWarp, true><<<L.grid, L.block, 0, stream()>>>(
            ptr<T>(dy), ptr<T>(x), ptr<float>(gamma), ptr<float>(mean), ptr<float>(rstd),
            ptr<T>(dx), n, c);
      else
        backward_dx_kernel<T, kWarp, false><<<L.grid, L.block, 0, stream()>>>(
            ptr<T>(dy), ptr<T>(x), ptr<float>(gamma), ptr<float>(mean), ptr<float>(rstd),
            ptr<T>(dx), n, c);
    });
    ::megatron::cuda::check_launch("layernorm_backward dx");
  });
}

}  // namespace megatron::kernels::cuda
