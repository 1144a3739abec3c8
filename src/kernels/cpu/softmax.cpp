// Scaled, masked softmax forward/backward on CPU (contract: kernels/softmax.h, checked by
// kernels/softmax.cpp). One row (batch, head, query) per OpenMP iteration, statistics in f32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels::cpu {

namespace {

// probs row = softmax(scale · scores + mask). Keys [0, visible) that pad[] does not mark are
// unmasked (pad[] is one row per sample, or with per_query one per sample and query); with causal,
// query i sees keys j <= i + (Sk − Sq) (the last Sq queries of an Sk-long sequence, which is Sq ==
// Sk for training and Sq < Sk when decoding with a cache). kHasPad is a template parameter so the
// unpadded loops carry no mask loads at all.
template <typename T, bool kHasPad>
void forward_rows(const T* scores, float scale, bool causal, const uint8_t* pad, bool per_query,
                  T* probs, int64_t b, int64_t h, int64_t sq, int64_t sk) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t rows = b * h * sq;
#pragma omp parallel
  {
    std::vector<float> e(static_cast<size_t>(sk));  // [Sk] this thread's unnormalised exp row
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t bi = r / (h * sq), qi = r % sq;
      const T* s = scores + r * sk;  // [Sk]
      T* p = probs + r * sk;         // [Sk]
      const int64_t pad_row = per_query ? bi * sq + qi : bi;
      const uint8_t* padr = kHasPad ? pad + pad_row * sk : nullptr;  // [Sk]
      const int64_t visible = causal ? std::min(sk, qi + (sk - sq) + 1) : sk;
      auto logit = [&](int64_t j) {  // scale · score, or −inf where padded
        const float v = scale * to_f32(s[j]);
        if constexpr (kHasPad) return padr[j] ? kNegInf : v;
        return v;
      };
      const float mx = max_reduce(visible, logit);
      if (mx == kNegInf) {  // every key masked: all zeros
        for (int64_t j = 0; j < sk; ++j) p[j] = from_f32<T>(0.f);
        continue;
      }
      // exp(−inf) = 0 masks the padded keys. The f32 row keeps bf16 probs to one rounding.
      float sum = 0.f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < visible; ++j) {
        e[size_t(j)] = exp_approx(logit(j) - mx);
        sum += e[size_t(j)];
      }
      const float inv = 1.f / sum;
#pragma omp simd
      for (int64_t j = 0; j < visible; ++j) p[j] = from_f32<T>(e[size_t(j)] * inv);
      for (int64_t j = visible; j < sk; ++j) p[j] = from_f32<T>(0.f);
    }
  }
}

template <typename T>
void backward_rows(const T* dprobs, const T* probs, float scale, T* dscores, int64_t rows,
                   int64_t sk) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* dp = dprobs + r * sk;  // [Sk]
    const T* p = probs + r * sk;    // [Sk]
    T* ds = dscores + r * sk;       // [Sk], may alias dp: each element is read before written
    float dot = 0.f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < sk; ++j) dot += to_f32(dp[j]) * to_f32(p[j]);
#pragma omp simd
    for (int64_t j = 0; j < sk; ++j)
      ds[j] = from_f32<T>(scale * to_f32(p[j]) * (to_f32(dp[j]) - dot));
  }
}

}  // namespace

void scaled_masked_softmax_forward(const Tensor& scores, float scale, bool causal,
                                   const Tensor& pad_mask, Tensor& probs) {
  const int64_t b = scores.size(0), h = scores.size(1), sq = scores.size(2), sk = scores.size(3);
  dispatch_float(scores.dtype(), "softmax scores", [&](auto tag) {
    using T = decltype(tag);
    if (pad_mask.defined())
      forward_rows<T, true>(scores.data<T>(), scale, causal, pad_mask.data<uint8_t>(),
                            pad_mask.dim() == 3, probs.data<T>(), b, h, sq, sk);
    else
      forward_rows<T, false>(scores.data<T>(), scale, causal, nullptr, false, probs.data<T>(), b, h,
                             sq, sk);
  });
}

void scaled_masked_softmax_backward(const Tensor& dprobs, const Tensor& probs, float scale,
                                    Tensor& dscores) {
  const int64_t sk = probs.size(-1);
  const int64_t rows = sk ? probs.numel() / sk : 0;
  dispatch_float(probs.dtype(), "softmax backward probs", [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dprobs.data<T>(), probs.data<T>(), scale, dscores.data<T>(), rows, sk);
  });
}

}  // namespace megatron::kernels::cpu
