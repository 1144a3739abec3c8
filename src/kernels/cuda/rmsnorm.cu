// RMSNorm forward/backward on CUDA (contract: kernels/rmsnorm.h; CPU twin:
// kernels/cpu/rmsnorm.cpp). Statistics in f32.
//
// Forward: one warp or block per row (cuda_rows.cuh): Σ x² by a fixed-order reduction, then
// the output. Backward: dx by the same row kernel (Σ g·x̂ per row, then dx); dγ = Σ_rows dy·x̂
// by the deterministic column reduction of cuda_rows.cuh, added (+=) to dgamma. No atomics.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

template <typename T, bool kWarp>
__global__ void __launch_bounds__(512) forward_kernel(const T* x, const float* gamma, float eps,
                                                      T* y, float* rstd, int64_t n, int64_t c) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < n; r += G::stride()) {
    const T* xr = x + r * c;  // [C]
    T* yr = y + r * c;        // [C]
    float sq = 0.f;
    for (int64_t j = G::lane(); j < c; j += G::width()) sq += to_f32(xr[j]) * to_f32(xr[j]);
    const float rs = 1.f / sqrtf(G::sum(sq, smem) / float(c) + eps);
    for (int64_t j = G::lane(); j < c; j += G::width())
      yr[j] = from_f32<T>(to_f32(xr[j]) * rs * gamma[j]);
    if (G::lane() == 0) rstd[r] = rs;
  }
}

// dx = rstd · (g − x̂ · mean(g · x̂)), g = dy · γ, x̂ = x · rstd; written when kAccumulate is
// false (dx is not read), else added to dx (beta_dx = 1).
template <typename T, bool kWarp, bool kAccumulate>
__global__ void __launch_bounds__(512)
    backward_dx_kernel(const T* dy, const T* x, const float* gamma, const float* rstd, T* dx,
                       int64_t n, int64_t c) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < n; r += G::stride()) {
    const T* dyr = dy + r * c;
    const T* xr = x + r * c;
    T* dxr = dx + r * c;
    const float rs = rstd[r];
    float sum_gx = 0.f;
    for (int64_t j = G::lane(); j < c; j += G::width())
      sum_gx += to_f32(dyr[j]) * gamma[j] * (to_f32(xr[j]) * rs);
    const float mean_gx = G::sum(sum_gx, smem) / float(c);
    for (int64_t j = G::lane(); j < c; j += G::width()) {
      const float v = rs * (to_f32(dyr[j]) * gamma[j] - to_f32(xr[j]) * rs * mean_gx);
      if constexpr (kAccumulate)
        dxr[j] = from_f32<T>(to_f32(dxr[j]) + v);
      else
        dxr[j] = from_f32<T>(v);
    }
  }
}

// Column term of the gain's gradient: v = {dy·x̂}.
template <typename T>
struct GammaTerm {
  const T* dy;
  const T* x;
  const float* rstd;
  __device__ void operator()(int64_t r, int64_t, int64_t i, float (&v)[1]) const {
    v[0] = to_f32(dy[i]) * (to_f32(x[i]) * rstd[r]);
  }
};

}  // namespace

void rmsnorm_forward(const Tensor& x, const Tensor& gamma, float eps, Tensor& y, Tensor& rstd) {
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0 || c == 0) return;
  const RowLaunch L = row_launch(n, c);
  dispatch_float(x.dtype(), "rmsnorm_forward x", [&](auto tag) {
    using T = decltype(tag);
    with_row_mode(L, [&](auto warp) {
      forward_kernel<T, decltype(warp)::value><<<L.grid, L.block, 0, stream()>>>(
          ptr<T>(x), ptr<float>(gamma), eps, ptr<T>(y), ptr<float>(rstd), n, c);
    });
  });
  ::megatron::cuda::check_launch("rmsnorm_forward");
}

void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& rstd,
                      Tensor& dx, Tensor& dgamma, float beta_dx) {
  const int64_t n = x.size(0), c = x.size(1);
  if (n == 0 || c == 0) return;
  const RowLaunch L = row_launch(n, c);
  const bool accumulate = beta_dx != 0.f;  // validated: 0 or 1
  dispatch_float(x.dtype(), "rmsnorm_backward x", [&](auto tag) {
    using T = decltype(tag);
    // The column sum goes first: it reads dy and x, which dx may alias (the dx kernel reads
    // each row whole before it writes any of it).
    const GammaTerm<T> term{ptr<T>(dy), ptr<T>(x), ptr<float>(rstd)};
    column_sums<1>(term, n, c, ColumnOutputs<1>{{ptr<float>(dgamma)}}, x.device(),
                   "rmsnorm_backward dgamma");
    with_row_mode(L, [&](auto warp) {
      constexpr bool kWarp = decltype(warp)::value;
      if (accumulate)
        backward_dx_kernel<T, kWarp, true><<<L.grid, L.block, 0, stream()>>>(
            ptr<T>(dy), ptr<T>(x), ptr<float>(gamma), ptr<float>(rstd), ptr<T>(dx), n, c);
      else
        backward_dx_kernel<T, kWarp, false><<<L.grid, L.block, 0, stream()>>>(
            ptr<T>(dy), ptr<T>(x), ptr<float>(gamma), ptr<float>(rstd), ptr<T>(dx), n, c);
    });
    ::megatron::cuda::check_launch("rmsnorm_backward dx");
  });
}

}  // namespace megatron::kernels::cuda
