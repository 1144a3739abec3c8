// Whole-buffer kernels on CPU (contract: kernels/elementwise.h, checked by
// kernels/elementwise.cpp): cast, copy, fill, scale, axpy, sum of squares, weighted sum,
// inf/NaN check. The float kernels accept f32, bf16 and f16 buffers (contiguous).
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

inline float load(float x) {
  return x;
}
inline float load(bf16 x) {
  return to_f32(x);
}
inline float load(f16 x) {
  return f16::to_float(x.bits);
}

template <typename T>
inline T store(float f) {
  if constexpr (std::is_same_v<T, f16>) {
    f16 r;
    r.bits = f16::from_float(f);
    return r;
  } else {
    return from_f32<T>(f);
  }
}

// Calls fn(T{}) with T = float, bf16 or f16.
template <typename Fn>
void dispatch_any_float(const Tensor& t, const char* what, Fn&& fn) {
  dispatch_dtype<float, bf16, f16>(t.dtype(), what, std::forward<Fn>(fn));
}

// Fixed-size chunks for reductions: the summation order depends on the length only, so the
// result is the same for any thread count.
constexpr int64_t kReduceChunk = 1 << 16;

}  // namespace

void cast(const Tensor& src, Tensor& dst) {
  const int64_t n = src.numel();
  if (src.dtype() == DType::F64) {  // to f32 (kernels/elementwise.cpp checked)
    const double* s = src.data<double>();
    float* d = dst.data<float>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = float(s[i]);
    return;
  }
  if (dst.dtype() == DType::F64) {  // from f32: exact
    const float* s = src.data<float>();
    double* d = dst.data<double>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) d[i] = double(s[i]);
    return;
  }
  dispatch_any_float(src, "cast src", [&](auto src_tag) {
    dispatch_any_float(dst, "cast dst", [&](auto dst_tag) {
      using S = decltype(src_tag);
      using D = decltype(dst_tag);
      const S* s = src.data<S>();
      D* d = dst.data<D>();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) d[i] = store<D>(load(s[i]));
    });
  });
}

void fill(Tensor& t, float value) {
  dispatch_any_float(t, "fill tensor", [&](auto tag) {
    using T = decltype(tag);
    std::fill(t.data<T>(), t.data<T>() + t.numel(), store<T>(value));
  });
}

void scale(Tensor& t, float factor) {
  dispatch_any_float(t, "scale tensor", [&](auto tag) {
    using T = decltype(tag);
    T* p = t.data<T>();
    const int64_t n = t.numel();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) p[i] = store<T>(load(p[i]) * factor);
  });
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  dispatch_any_float(x, "axpy x", [&](auto x_tag) {
    dispatch_any_float(y, "axpy y", [&](auto y_tag) {
      using X = decltype(x_tag);
      using Y = decltype(y_tag);
      const X* xp = x.data<X>();
      Y* yp = y.data<Y>();
      const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) yp[i] = store<Y>(load(yp[i]) + alpha * load(xp[i]));
    });
  });
}

double sum_squares(const Tensor& t) {
  double total = 0.0;
  dispatch_any_float(t, "sum_squares tensor", [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    const int64_t n = t.numel();
    const int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
    std::vector<double> partial(size_t(chunks), 0.0);  // [chunks]
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      double s = 0.0;
      const int64_t end = std::min(n, (k + 1) * kReduceChunk);
#pragma omp simd reduction(+ : s)
      for (int64_t i = k * kReduceChunk; i < end; ++i) {
        const double v = load(p[i]);
        s += v * v;
      }
      partial[size_t(k)] = s;
    }
    for (double s : partial) total += s;
  });
  return total;
}

bool has_inf_or_nan(const Tensor& t) {
  bool found = false;
  dispatch_any_float(t, "has_inf_or_nan tensor", [&](auto tag) {
    using T = decltype(tag);
    // Inf and NaN are exactly the encodings whose exponent bits are all ones.
    using Bits = std::conditional_t<std::is_same_v<T, float>, uint32_t, uint16_t>;
    constexpr Bits kExp = std::is_same_v<T, float>  ? Bits(0x7f800000u)
                          : std::is_same_v<T, bf16> ? Bits(0x7f80u)
                                                    : Bits(0x7c00u);
    const Bits* p = static_cast<const Bits*>(t.raw_data());
    const int64_t n = t.numel();
    int any = 0;
#pragma omp parallel for simd schedule(static) reduction(| : any)
    for (int64_t i = 0; i < n; ++i) any |= int((p[i] & kExp) == kExp);
    found = any != 0;
  });
  return found;
}

int64_t count_zeros(const Tensor& t) {
  int64_t total = 0;
  dispatch_any_float(t, "count_zeros tensor", [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t i = 0; i < n; ++i) total += load(p[i]) == 0.0 ? 1 : 0;
  });
  return total;
}

void copy(const Tensor& src, Tensor& dst) {
  dst.copy_from(src);  // the host's strided walk (core/tensor.cpp), any dtype
}

WeightedSum weighted_sum(const Tensor& values, const Tensor& weights) {
  const float* v = values.data<float>();   // [N]
  const float* w = weights.data<float>();  // [N]
  const int64_t n = values.numel();
  // Partial sums per chunk, then over chunks in order: the chunk count depends on N only.
  const int64_t chunks = reduction_chunks(n);
  std::vector<double> weighted(size_t(chunks), 0.0), total(size_t(chunks), 0.0);  // [chunks]
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    double sw = 0.0, sv = 0.0;
    for (int64_t i = n * k / chunks; i < n * (k + 1) / chunks; ++i) {
      sv += double(v[i]) * double(w[i]);
      sw += double(w[i]);
    }
    weighted[size_t(k)] = sv;
    total[size_t(k)] = sw;
  }
  WeightedSum out;
  for (int64_t k = 0; k < chunks; ++k) {
    out.weighted += weighted[size_t(k)];
    out.weights += total[size_t(k)];
  }
  return out;
}

}  // namespace megatron::kernels::cpu
