// Dropout masks from Philox and the kernels that apply them, on CPU (contract:
// kernels/dropout.h, checked by kernels/dropout.cpp).
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dropout_draws.h"

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
  const uint32_t threshold = keep_threshold(p);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_rows; ++r)
    draw_keep_row(seed, rows[size_t(r)].key, rows[size_t(r)].counter_base, cols, threshold,
                  m + r * cols);
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
