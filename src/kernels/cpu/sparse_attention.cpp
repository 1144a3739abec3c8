// DSA's top-k selection and indexer loss on CPU (contract: kernels/sparse_attention.h, checked
// by kernels/sparse_attention.cpp). One query row per OpenMP iteration.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

constexpr float kEps = 1e-10f;  // Megatron-Core's clamp of the target's sum and logarithm

// Keys [0, visible) of query i among Sq queries over Sk keys (causal).
int64_t visible_keys(int64_t i, int64_t sq, int64_t sk) {
  return std::min(sk, i + (sk - sq) + 1);
}

}  // namespace

void index_scores(const Tensor& raw, const Tensor& weights, bool relu, Tensor& scores) {
  const int64_t b = raw.size(0), h = raw.size(1), sq = raw.size(2), sk = raw.size(3);
  const float* r = raw.data<float>();
  const float* w = weights.data<float>();
  float* out = scores.data<float>();
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < sq; ++i) {
      float* row = out + (bi * sq + i) * sk;  // [Sk]
      std::fill(row, row + sk, 0.f);
      for (int64_t hi = 0; hi < h; ++hi) {
        const float wh = w[(i * b + bi) * h + hi];
        const float* rr = r + ((bi * h + hi) * sq + i) * sk;  // [Sk]
#pragma omp simd
        for (int64_t j = 0; j < sk; ++j) row[j] += wh * (relu ? std::max(rr[j], 0.f) : rr[j]);
      }
    }
}

void index_scores_backward(const Tensor& dscores, const Tensor& raw, const Tensor& weights,
                           bool relu, Tensor& draw, Tensor& dweights) {
  const int64_t b = raw.size(0), h = raw.size(1), sq = raw.size(2), sk = raw.size(3);
  const float* ds = dscores.data<float>();
  const float* r = raw.data<float>();
  const float* w = weights.data<float>();
  float* dr = draw.data<float>();
  float* dw = dweights.data<float>();
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < sq; ++i) {
        const float* d = ds + (bi * sq + i) * sk;           // [Sk]
        const int64_t row = ((bi * h + hi) * sq + i) * sk;  // [Sk] of raw and draw
        const float wh = w[(i * b + bi) * h + hi];
        float dot = 0.f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < sk; ++j) {
          const float x = r[row + j];
          const bool pass = !relu || x > 0.f;
          dr[row + j] = pass ? d[j] * wh : 0.f;
          dot += pass ? d[j] * x : 0.f;
        }
        dw[(i * b + bi) * h + hi] = dot;
      }
}

void topk_key_mask(const Tensor& scores, int64_t k, Tensor& mask) {
  const int64_t sq = scores.size(1), sk = scores.size(2), rows = scores.size(0) * sq;
  const float* s = scores.data<float>();
  uint8_t* m = mask.data<uint8_t>();
#pragma omp parallel
  {
    std::vector<int64_t> order;  // this thread's candidate keys
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = s + r * sk;  // [Sk]
      uint8_t* out = m + r * sk;      // [Sk]
      const int64_t visible = visible_keys(r % sq, sq, sk);
      std::fill(out, out + sk, uint8_t{1});
      if (visible <= k) {
        std::fill(out, out + visible, uint8_t{0});
        continue;
      }
      order.resize(size_t(visible));
      std::iota(order.begin(), order.end(), int64_t{0});
      // The contract's order: score descending, ties to the smaller index.
      std::nth_element(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return row[a] > row[b] || (row[a] == row[b] && a < b);
      });
      for (int64_t t = 0; t < k; ++t) out[order[size_t(t)]] = 0;
    }
  }
}

void indexer_kl(const Tensor& scores, const Tensor& target, const Tensor& key_mask, Tensor& kl,
                Tensor& dscores) {
  const int64_t sq = scores.size(1), sk = scores.size(2), rows = scores.size(0) * sq;
  const float* s = scores.data<float>();
  const float* t = target.data<float>();
  const uint8_t* km = key_mask.defined() ? key_mask.data<uint8_t>() : nullptr;
  float* out_kl = kl.data<float>();
  float* ds = dscores.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = s + r * sk;                           // [Sk] the indexer's scores
    const float* tr = t + r * sk;                          // [Sk] the target (unnormalised)
    const uint8_t* excluded = km ? km + r * sk : nullptr;  // [Sk] or null
    float* d = ds + r * sk;                                // [Sk]
    const int64_t visible = visible_keys(r % sq, sq, sk);
    auto valid = [&](int64_t j) { return j < visible && !(excluded && excluded[j]); };
    float mx = -std::numeric_limits<float>::infinity(), total = 0.f;
    for (int64_t j = 0; j < visible; ++j)
      if (valid(j)) {
        mx = std::max(mx, x[j]);
        total += tr[j];
      }
    std::fill(d, d + sk, 0.f);
    out_kl[r] = 0.f;
    if (mx == -std::numeric_limits<float>::infinity()) continue;  // no valid key
    float z = 0.f;
    for (int64_t j = 0; j < visible; ++j)
      if (valid(j)) z += std::exp(x[j] - mx);
    const float log_z = std::log(z), inv_total = 1.f / std::max(total, kEps);
    float target_sum = 0.f, row_kl = 0.f;
    for (int64_t j = 0; j < visible; ++j)
      if (valid(j)) {
        const float tn = tr[j] * inv_total, log_p = x[j] - mx - log_z;
        target_sum += tn;
        row_kl += tn * (std::log(std::max(tn, kEps)) - log_p);
      }
    for (int64_t j = 0; j < visible; ++j)
      if (valid(j)) d[j] = std::exp(x[j] - mx - log_z) * target_sum - tr[j] * inv_total;
    out_kl[r] = row_kl;
  }
}

}  // namespace megatron::kernels::cpu
