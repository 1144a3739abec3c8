// Dropout masks from Philox and the kernels that apply them, on CPU (contract:
// kernels/dropout.h).
#include "kernels/dropout.h"

#include <vector>

#include "core/philox.h"
#include "kernels/cpu/cpu_common.h"

namespace megatron::kernels {

namespace {

void check_p(float p, const char* kernel) {
  MT_CHECK(p >= 0.f && p < 1.f, kernel, ": dropout probability must be in [0, 1), got ", p);
}

void check_mask(const Tensor& mask, int64_t numel, const char* what) {
  check_dtype(mask, DType::U8, what);
  check_contiguous(mask, what);
  MT_CHECK(mask.numel() == numel, what, " has ", mask.numel(), " elements, expected ", numel);
}

void check_like(const Tensor& t, const Tensor& like, const char* what) {
  check_shape(t, like.shape(), what);
  check_dtype(t, like.dtype(), what);
  check_contiguous(t, what);
}

// out[i] = in[i] · mask[i] · keep_scale over n elements.
template <typename T>
void apply_mask(const T* in, const uint8_t* mask, float keep_scale, T* out, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i)
    out[i] = cpu::from_f32<T>(mask[i] ? cpu::to_f32(in[i]) * keep_scale : 0.f);
}

}  // namespace

void dropout_mask(uint64_t seed, const std::vector<MaskRow>& rows, float p, Tensor& mask) {
  cpu::require_cpu("dropout_mask", {&mask});
  check_p(p, "dropout_mask");
  check_dtype(mask, DType::U8, "dropout_mask mask");
  check_contiguous(mask, "dropout_mask mask");
  MT_CHECK(mask.dim() == 2, "dropout_mask mask must be [rows, cols], got ", mask.describe());
  MT_CHECK(int64_t(rows.size()) == mask.size(0), "dropout_mask got ", rows.size(),
           " row keys for a mask of ", mask.size(0), " rows");
  const int64_t n_rows = mask.size(0), cols = mask.size(1);
  uint8_t* m = mask.data<uint8_t>();
  // Keep iff (u32 >> 8) · 2^-24 >= p, i.e. iff (u32 >> 8) >= ceil(p · 2^24); comparing
  // integers gives exactly PhiloxStream::uniform(i) >= p without a float per draw.
  const double scaled = double(p) * 16777216.0;
  uint32_t threshold = uint32_t(scaled);
  if (double(threshold) < scaled) ++threshold;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n_rows; ++r) {
    const PhiloxStream stream(seed, rows[size_t(r)].key);
    const uint64_t base = rows[size_t(r)].counter_base;
    uint8_t* mr = m + r * cols;  // [cols]
    int64_t c = 0;
    while (c < cols) {
      // One Philox block yields draws 4b..4b+3; use every one of them that falls in the row.
      const uint64_t i = base + uint64_t(c);
      const PhiloxCounter w = stream.block(i / 4);
      for (uint64_t lane = i % 4; lane < 4 && c < cols; ++lane, ++c)
        mr[c] = uint8_t((w[lane] >> 8) >= threshold);
    }
  }
}

void dropout_forward(const Tensor& x, const Tensor& mask, float p, Tensor& y) {
  cpu::require_cpu("dropout_forward", {&x, &mask, &y});
  check_p(p, "dropout_forward");
  cpu::check_float_contiguous(x, "dropout_forward x");
  check_like(y, x, "dropout_forward y");
  check_mask(mask, x.numel(), "dropout_forward mask");
  cpu::dispatch_float(x.dtype(), "dropout_forward x", [&](auto tag) {
    using T = decltype(tag);
    apply_mask<T>(x.data<T>(), mask.data<uint8_t>(), 1.f / (1.f - p), y.data<T>(), x.numel());
  });
}

void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  cpu::require_cpu("dropout_backward", {&dy, &mask, &dx});
  check_p(p, "dropout_backward");
  cpu::check_float_contiguous(dy, "dropout_backward dy");
  check_like(dx, dy, "dropout_backward dx");
  check_mask(mask, dy.numel(), "dropout_backward mask");
  cpu::dispatch_float(dy.dtype(), "dropout_backward dy", [&](auto tag) {
    using T = decltype(tag);
    apply_mask<T>(dy.data<T>(), mask.data<uint8_t>(), 1.f / (1.f - p), dx.data<T>(), dy.numel());
  });
}

void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                              const Tensor& mask, float p, Tensor& y) {
  cpu::require_cpu("bias_dropout_add_forward", {&x, &bias, &residual, &mask, &y});
  cpu::check_float_contiguous(x, "bias_dropout_add_forward x");
  MT_CHECK(x.dim() == 2, "bias_dropout_add_forward x must be [N, C], got ", x.describe());
  const int64_t n = x.size(0), c = x.size(1);
  check_like(residual, x, "bias_dropout_add_forward residual");
  check_like(y, x, "bias_dropout_add_forward y");
  if (bias.defined()) {
    check_shape(bias, {c}, "bias_dropout_add_forward bias");
    check_dtype(bias, x.dtype(), "bias_dropout_add_forward bias");
    check_contiguous(bias, "bias_dropout_add_forward bias");
  }
  if (mask.defined()) {
    check_p(p, "bias_dropout_add_forward");
    check_mask(mask, x.numel(), "bias_dropout_add_forward mask");
  }
  const float keep_scale = mask.defined() ? 1.f / (1.f - p) : 1.f;
  cpu::dispatch_float(x.dtype(), "bias_dropout_add_forward x", [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();                                            // [N, C]
    const T* bp = bias.defined() ? bias.data<T>() : nullptr;              // [C]
    const T* rp = residual.data<T>();                                     // [N, C]
    const uint8_t* mp = mask.defined() ? mask.data<uint8_t>() : nullptr;  // [N, C]
    T* yp = y.data<T>();                                                  // [N, C]
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const int64_t i = r * c + j;
        float v = cpu::to_f32(xp[i]) + (bp ? cpu::to_f32(bp[j]) : 0.f);
        if (mp) v = mp[i] ? v * keep_scale : 0.f;
        yp[i] = cpu::from_f32<T>(cpu::to_f32(rp[i]) + v);
      }
    }
  });
}

void bias_dropout_add_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx,
                               Tensor& dbias) {
  cpu::require_cpu("bias_dropout_add_backward", {&dy, &mask, &dx, &dbias});
  cpu::check_float_contiguous(dy, "bias_dropout_add_backward dy");
  MT_CHECK(dy.dim() == 2, "bias_dropout_add_backward dy must be [N, C], got ", dy.describe());
  const int64_t n = dy.size(0), c = dy.size(1);
  check_like(dx, dy, "bias_dropout_add_backward dx");
  if (mask.defined()) {
    check_p(p, "bias_dropout_add_backward");
    check_mask(mask, dy.numel(), "bias_dropout_add_backward mask");
  }
  if (dbias.defined()) {
    check_shape(dbias, {c}, "bias_dropout_add_backward dbias");
    check_dtype(dbias, DType::F32, "bias_dropout_add_backward dbias");
    check_contiguous(dbias, "bias_dropout_add_backward dbias");
  }
  const float keep_scale = mask.defined() ? 1.f / (1.f - p) : 1.f;
  cpu::dispatch_float(dy.dtype(), "bias_dropout_add_backward dy", [&](auto tag) {
    using T = decltype(tag);
    const T* dyp = dy.data<T>();                                          // [N, C]
    const uint8_t* mp = mask.defined() ? mask.data<uint8_t>() : nullptr;  // [N, C]
    T* dxp = dx.data<T>();                                                // [N, C]
    float* db = dbias.defined() ? dbias.data<float>() : nullptr;          // [C]
    // dbias partial sums per chunk of rows [chunks, C], summed in chunk order.
    const int64_t chunks = db ? cpu::reduction_chunks(n) : 1;
    std::vector<float> partial(db ? size_t(chunks * c) : 0, 0.f);
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      float* pb = db ? partial.data() + k * c : nullptr;
      for (int64_t r = n * k / chunks; r < n * (k + 1) / chunks; ++r) {
#pragma omp simd
        for (int64_t j = 0; j < c; ++j) {
          const int64_t i = r * c + j;
          float g = cpu::to_f32(dyp[i]);
          if (mp) g = mp[i] ? g * keep_scale : 0.f;
          dxp[i] = cpu::from_f32<T>(g);
          if (pb) pb[j] += g;
        }
      }
    }
    for (int64_t k = 0; db && k < chunks; ++k)
      for (int64_t j = 0; j < c; ++j) db[j] += partial[size_t(k * c + j)];
  });
}

}  // namespace megatron::kernels
