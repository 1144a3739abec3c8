// Scaled, masked softmax forward/backward on CUDA (contract: kernels/softmax.h; CPU twin:
// kernels/cpu/softmax.cpp). One warp per row up to 1024 keys, one block per row beyond (any
// length), statistics in f32, fixed-order reductions (cuda_rows.cuh).
//
// Masking exactly as the CPU: query i of Sq sees keys j <= i + (Sk − Sq) when causal (keys past
// that get probability 0 and are never read), pad_mask[b, j] = 1 (or per query,
// pad_mask[b, i, j] = 1) makes key j's logit −inf
// (exp → 0). The max skips NaN as the CPU's does; a row whose max is −inf (every key masked)
// is all zeros, never NaN. probs = e_j · (1 / Σ e), as the CPU's inv · e.
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_rows.cuh"

namespace megatron::kernels::cuda {

namespace {

template <typename T, bool kWarp>
__global__ void __launch_bounds__(512)
    forward_kernel(const T* scores, float scale, bool causal, const uint8_t* pad, bool per_query,
                   T* probs, int64_t h, int64_t sq, int64_t sk, int64_t rows) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < rows; r += G::stride()) {
    const int64_t bi = r / (h * sq), qi = r % sq;
    const T* s = scores + r * sk;  // [Sk]
    T* p = probs + r * sk;         // [Sk]
    const int64_t pad_row = per_query ? bi * sq + qi : bi;
    const uint8_t* padr = pad ? pad + pad_row * sk : nullptr;  // [Sk]
    const int64_t last = qi + (sk - sq) + 1;                   // causal: keys [0, last)
    const int64_t visible = causal && last < sk ? last : sk;
    auto logit = [&](int64_t j) {  // scale · score, or −inf where padded
      const float v = scale * to_f32(s[j]);
      return padr && padr[j] ? -CUDART_INF_F : v;
    };
    float mx = -CUDART_INF_F;
    for (int64_t j = G::lane(); j < visible; j += G::width()) mx = fmaxf(mx, logit(j));
    mx = G::max(mx, smem);
    if (mx == -CUDART_INF_F) {  // every key masked (uniform over the group): all zeros
      for (int64_t j = G::lane(); j < sk; j += G::width()) p[j] = from_f32<T>(0.f);
      continue;
    }
    float sum = 0.f;
    for (int64_t j = G::lane(); j < visible; j += G::width()) sum += expf(logit(j) - mx);
    const float inv = 1.f / G::sum(sum, smem);
    for (int64_t j = G::lane(); j < sk; j += G::width())
      p[j] = from_f32<T>(j < visible ? expf(logit(j) - mx) * inv : 0.f);
  }
}

// dscores = scale · probs ⊙ (dprobs − Σ_j dprobs·probs). dscores may alias dprobs: every element
// is read and written by the one thread that owns it.
template <typename T, bool kWarp>
__global__ void __launch_bounds__(512) backward_kernel(const T* dprobs, const T* probs, float scale,
                                                       T* dscores, int64_t rows, int64_t sk) {
  using G = RowGroup<kWarp>;
  __shared__ float smem[32];
  for (int64_t r = G::first(); r < rows; r += G::stride()) {
    const T* dp = dprobs + r * sk;
    const T* p = probs + r * sk;
    T* ds = dscores + r * sk;
    float dot = 0.f;
    for (int64_t j = G::lane(); j < sk; j += G::width()) dot += to_f32(dp[j]) * to_f32(p[j]);
    dot = G::sum(dot, smem);
    for (int64_t j = G::lane(); j < sk; j += G::width())
      ds[j] = from_f32<T>(scale * to_f32(p[j]) * (to_f32(dp[j]) - dot));
  }
}

}  // namespace

void scaled_masked_softmax_forward(const Tensor& scores, float scale, bool causal,
                                   const Tensor& pad_mask, Tensor& probs) {
  const int64_t b = scores.size(0), h = scores.size(1), sq = scores.size(2), sk = scores.size(3);
  const int64_t rows = b * h * sq;
  if (rows == 0 || sk == 0) return;
  const uint8_t* pad = pad_mask.defined() ? ptr<uint8_t>(pad_mask) : nullptr;
  const RowLaunch L = row_launch(rows, sk);
  dispatch_float(scores.dtype(), "scaled_masked_softmax_forward scores", [&](auto tag) {
    using T = decltype(tag);
    with_row_mode(L, [&](auto warp) {
      forward_kernel<T, decltype(warp)::value><<<L.grid, L.block, 0, stream()>>>(
          ptr<T>(scores), scale, causal, pad, pad_mask.dim() == 3, ptr<T>(probs), h, sq, sk, rows);
    });
  });
  ::megatron::cuda::check_launch("scaled_masked_softmax_forward");
}

void scaled_masked_softmax_backward(const Tensor& dprobs, const Tensor& probs, float scale,
                                    Tensor& dscores) {
  const int64_t sk = probs.dim() ? probs.size(-1) : 1;
  const int64_t rows = sk ? probs.numel() / sk : 0;
  if (rows == 0 || sk == 0) return;
  const RowLaunch L = row_launch(rows, sk);
  dispatch_float(probs.dtype(), "scaled_masked_softmax_backward probs", [&](auto tag) {
    using T = decltype(tag);
    with_row_mode(L, [&](auto warp) {
      backward_kernel<T, decltype(warp)::value><<<L.grid, L.block, 0, stream()>>>(
          ptr<T>(dprobs), ptr<T>(probs), scale, ptr<T>(dscores), rows, sk);
    });
  });
  ::megatron::cuda::check_launch("scaled_masked_softmax_backward");
}

}  // namespace megatron::kernels::cuda
