// Rotary embedding on CPU (contract: kernels/rotary.h, checked by kernels/rotary.cpp). The
// angles of each position are computed once per call in f32, then every (position, head) row
// is rotated pair by pair; both channels of a pair are read before either is written, so
// y may be x.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

// Element offsets of the rows of t [s, ..., d] from element 0, row-major over (s, middle
// dims), so the parallel loop below does no index arithmetic on Tensor.
std::vector<int64_t> row_offsets(const Tensor& t) {
  const int64_t rows = t.numel() / t.size(-1);
  std::vector<int64_t> off(static_cast<size_t>(rows));
  for (int64_t row = 0; row < rows; ++row) {
    int64_t m = row, o = 0;
    for (int64_t k = t.dim() - 2; k >= 0; --k) {
      o += (m % t.size(k)) * t.stride(k);
      m /= t.size(k);
    }
    off[size_t(row)] = o;
  }
  return off;
}

template <typename T>
void rotate(const Tensor& x, int64_t position_start, const RotaryParams& p, bool inverse,
            Tensor& y) {
  const int64_t s = x.size(0), d = x.size(-1), half = p.rotary_dim / 2;
  const int64_t mid = x.numel() / (s * d);  // rows per position
  // inv_freq_j = 1 / base^(2j/r) (or YaRN's blend) and θ = (pos / f) · inv_freq_j in f32, as
  // Megatron computes; cos and sin times YaRN's concentration factor (1 without it).
  std::vector<float> inv_freq(static_cast<size_t>(half));
  const Llama3RopeScaling& l3 = p.llama3;
  const YarnTerms yarn = p.yarn ? yarn_terms(*p.yarn, p.rotary_dim, p.base) : YarnTerms{};
  for (int64_t j = 0; j < half; ++j) {
    const float base_pow = std::pow(p.base, float(2 * j) / float(p.rotary_dim));
    inv_freq[size_t(j)] = p.yarn ? yarn_inv_freq(base_pow, j, yarn) : 1.0f / base_pow;
    if (l3.enabled())
      inv_freq[size_t(j)] =
          llama3_scaled_inv_freq(inv_freq[size_t(j)], l3.factor, l3.low_freq_factor,
                                 l3.high_freq_factor, l3.original_max_position_embeddings);
  }
  std::vector<float> cos_t(size_t(s * half)), sin_t(size_t(s * half));  // [s, r/2]
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t i = 0; i < s; ++i) {
    const float pos = float(position_start + i) / p.seq_interpolation_factor;
    for (int64_t j = 0; j < half; ++j) {
      const float theta = pos * inv_freq[size_t(j)];
      cos_t[size_t(i * half + j)] = std::cos(theta) * yarn.concentration;
      sin_t[size_t(i * half + j)] = sign * (std::sin(theta) * yarn.concentration);
    }
  }
  const std::vector<int64_t> x_rows = row_offsets(x), y_rows = row_offsets(y);
  const T* xb = x.data<T>();
  T* yb = y.data<T>();
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < s * mid; ++row) {
    const int64_t i = row / mid;
    const T* xr = xb + x_rows[size_t(row)];
    T* yr = yb + y_rows[size_t(row)];
    const float* c = cos_t.data() + i * half;
    const float* sn = sin_t.data() + i * half;
    for (int64_t j = 0; j < half; ++j) {
      const int64_t lo = rotary_pair_lo(j, half, p.interleaved);
      const int64_t hi = rotary_pair_hi(j, half, p.interleaved);
      const float a = to_f32(xr[lo]), b = to_f32(xr[hi]);
      yr[lo] = from_f32<T>(a * c[j] - b * sn[j]);
      yr[hi] = from_f32<T>(b * c[j] + a * sn[j]);
    }
    if (yr != xr)
      for (int64_t j = p.rotary_dim; j < d; ++j) yr[j] = xr[j];
  }
}

}  // namespace

void rotary_embedding(const Tensor& x, int64_t position_start, const RotaryParams& p, bool inverse,
                      Tensor& y) {
  dispatch_float(x.dtype(), "rotary_embedding x",
                 [&](auto tag) { rotate<decltype(tag)>(x, position_start, p, inverse, y); });
}

}  // namespace megatron::kernels::cpu
