// Dropout masks from Philox and the kernels that apply them, on CPU (contract:
// kernels/dropout.h, checked by kernels/dropout.cpp).
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/philox_lanes.h"

namespace megatron::kernels::cpu {

namespace {

// out[i] = in[i] · mask[i] · keep_scale over n elements.
template <typename T>
void apply_mask(const T* in, const uint8_t* mask, float keep_scale, T* out, int64_t n) {
  constexpr int64_t kBlock = 4096;  // threads take blocks, each block is one vector loop
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (n + kBlock - 1) / kBlock; ++b) {
    const int64_t end = std::min(n, (b + 1) * kBlock);
#pragma omp simd
    for (int64_t i = b * kBlock; i < end; ++i) {
      const float kept = to_f32(in[i]) * keep_scale;  // loaded unconditionally: no branch
      out[i] = from_f32<T>(mask[i] ? kept : 0.f);
    }
  }
}

// y = residual + dropout(x + bias) over rows [N, C]; kMask = false skips dropout. Both are
// template parameters / always-present operands so the inner loop has no branches.
template <typename T, bool kMask>
void bias_dropout_add_rows(const T* x, const T* bias, const T* residual, const uint8_t* mask,
                           float keep_scale, T* y, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const int64_t i = r * c + j;
      float v = to_f32(x[i]) + to_f32(bias[j]);
      if constexpr (kMask) v = mask[i] ? v * keep_scale : 0.f;
      y[i] = from_f32<T>(to_f32(residual[i]) + v);
    }
  }
}

// dx = dropout'(dy) over rows [N, C], with Σ_rows dx added to dbias (when not null) through
// per-chunk partial sums [chunks, C] summed in chunk order (deterministic).
template <typename T, bool kMask>
void bias_dropout_add_backward_rows(const T* dy, const uint8_t* mask, float keep_scale, T* dx,
                                    float* dbias, int64_t n, int64_t c) {
  const int64_t chunks = reduction_chunks(n);
  std::vector<float> partial(size_t(chunks * c), 0.f);
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pb = partial.data() + k * c;
    for (int64_t r = n * k / chunks; r < n * (k + 1) / chunks; ++r) {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const int64_t i = r * c + j;
        float g = to_f32(dy[i]);
        if constexpr (kMask) g = mask[i] ? g * keep_scale : 0.f;
        dx[i] = from_f32<T>(g);
        pb[j] += g;
      }
    }
  }
  for (int64_t k = 0; dbias && k < chunks; ++k)
    for (int64_t j = 0; j < c; ++j) dbias[j] += partial[size_t(k * c + j)];
}

}  // namespace

void dropout_mask(uint64_t seed, const std::vector<MaskRow>& rows, float p, Tensor& mask) {
  const int64_t n_rows = mask.size(0), cols = mask.size(1);
  uint8_t* m = mask.data<uint8_t>();
  // Keep iff (u32 >> 8) · 2^-24 >= p, i.e. iff (u32 >> 8) >= ceil(p · 2^24); comparing
  // integers gives exactly PhiloxStream::uniform(i) >= p without a float per draw.
  const double scaled = double(p) * 16777216.0;
  uint32_t threshold = uint32_t(scaled);
  if (double(threshold) < scaled) ++threshold;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint64_t key = rows[size_t(r)].key, base = rows[size_t(r)].counter_base;
    uint8_t* mr = m + r * cols;  // [cols]
    // Draw i = base + c lives in block i / 4, word i % 4; take kPhiloxLanes blocks at a
    // time (8 with AVX2, 64 with AVX-512).
    constexpr int64_t kDraws = 4 * kPhiloxLanes;
    uint32_t words[kDraws];
    for (uint64_t block = base / 4; block * 4 < base + uint64_t(cols); block += kPhiloxLanes) {
      philox_blocks(seed, key, block, words);
      const uint64_t first = block * 4;  // draw index of words[0]
      const int64_t c0 = first > base ? int64_t(first - base) : 0;
      const int64_t c1 = std::min<int64_t>(cols, int64_t(first + kDraws - base));
#pragma omp simd
      for (int64_t c = c0; c < c1; ++c)
        mr[c] = uint8_t((words[base + uint64_t(c) - first] >> 8) >= threshold);
    }
  }
}

void dropout_forward(const Tensor& x, const Tensor& mask, float p, Tensor& y) {
  dispatch_float(x.dtype(), "dropout_forward x", [&](auto tag) {
    using T = decltype(tag);
    apply_mask<T>(x.data<T>(), mask.data<uint8_t>(), 1.f / (1.f - p), y.data<T>(), x.numel());
  });
}

void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  dispatch_float(dy.dtype(), "dropout_backward dy", [&](auto tag) {
    using T = decltype(tag);
    apply_mask<T>(dy.data<T>(), mask.data<uint8_t>(), 1.f / (1.f - p), dx.data<T>(), dy.numel());
  });
}

void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                              const Tensor& mask, float p, Tensor& y) {
  const int64_t n = x.size(0), c = x.size(1);
  const Tensor b = bias.defined() ? bias : Tensor::zeros({c}, x.dtype());
  dispatch_float(x.dtype(), "bias_dropout_add_forward x", [&](auto tag) {
    using T = decltype(tag);
    if (mask.defined())
      bias_dropout_add_rows<T, true>(x.data<T>(), b.data<T>(), residual.data<T>(),
                                     mask.data<uint8_t>(), 1.f / (1.f - p), y.data<T>(), n, c);
    else
      bias_dropout_add_rows<T, false>(x.data<T>(), b.data<T>(), residual.data<T>(), nullptr, 1.f,
                                      y.data<T>(), n, c);
  });
}

void bias_dropout_add_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx,
                               Tensor& dbias) {
  const int64_t n = dy.size(0), c = dy.size(1);
  dispatch_float(dy.dtype(), "bias_dropout_add_backward dy", [&](auto tag) {
    using T = decltype(tag);
    float* db = dbias.defined() ? dbias.data<float>() : nullptr;
    if (mask.defined())
      bias_dropout_add_backward_rows<T, true>(dy.data<T>(), mask.data<uint8_t>(), 1.f / (1.f - p),
                                              dx.data<T>(), db, n, c);
    else
      bias_dropout_add_backward_rows<T, false>(dy.data<T>(), nullptr, 1.f, dx.data<T>(), db, n, c);
  });
}

}  // namespace megatron::kernels::cpu
