// Helpers for the kernel tests: random tensors and conversion to/from double vectors, so
// that every reference is a plain double-precision loop independent of the kernels.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::test {

// Elements of the host tensor t (f32, f64, bf16, f16, i32, i64, u8) as doubles, in row-major
// order of its shape.
inline std::vector<double> to_double(const Tensor& t) {
  Tensor c = t.is_contiguous() ? t : t.clone();
  std::vector<double> out(size_t(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) {
    double& o = out[size_t(i)];
    switch (c.dtype()) {
      case DType::F32:
        o = c.data<float>()[i];
        break;
      case DType::F64:
        o = c.data<double>()[i];
        break;
      case DType::BF16:
        o = float(c.data<bf16>()[i]);
        break;
      case DType::F16:
        o = float(c.data<f16>()[i]);
        break;
      case DType::I32:
        o = double(c.data<int32_t>()[i]);
        break;
      case DType::I64:
        o = double(c.data<int64_t>()[i]);
        break;
      case DType::U8:
        o = double(c.data<uint8_t>()[i]);
        break;
      default:
        ADD_FAILURE() << "to_double: unsupported dtype " << dtype_name(c.dtype());
        break;
    }
  }
  return out;
}

// A contiguous tensor of dtype holding values (rounded to nearest even for f32 and 16-bit types).
inline Tensor from_double(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = float(values[size_t(i)]);
    switch (dtype) {
      case DType::F32:
        t.data<float>()[i] = v;
        break;
      case DType::F64:
        t.data<double>()[i] = values[size_t(i)];
        break;
      case DType::BF16:
        t.data<bf16>()[i] = bf16(v);
        break;
      case DType::F16:
        t.data<f16>()[i] = f16(v);
        break;
      default:
        ADD_FAILURE() << "from_double: unsupported dtype";
        break;
    }
  }
  return t;
}

// Uniform values in [lo, hi), rounded to dtype; deterministic in seed.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1.0,
                            double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (double& x : v) x = dist(gen);
  return from_double(v, shape, dtype);
}

// Largest |a − b| / (atol + rtol·|b|) over the elements; <= 1 means within tolerance.
inline double worst_ratio(const std::vector<double>& a, const std::vector<double>& b, double atol,
                          double rtol) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double r = std::abs(a[i] - b[i]) / (atol + rtol * std::abs(b[i]));
    if (!(r <= worst)) worst = r;  // also catches NaN
  }
  return worst;
}

// Central finite differences of a double function: grad[i] = (f(x + h·e_i) − f(x − h·e_i)) / 2h.
template <typename Fn>
std::vector<double> numeric_grad(Fn&& f, std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f(x);
    x[i] = keep - h;
    const double down = f(x);
    x[i] = keep;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// bf16 keeps 8 significant bits: one rounding is at most 2^-9 relative.
constexpr double kBf16Eps = 1.0 / 256.0;

}  // namespace megatron::test

#define EXPECT_CLOSE(actual, expected, atol, rtol) \
  EXPECT_LE(::megatron::test::worst_ratio((actual), (expected), (atol), (rtol)), 1.0)
