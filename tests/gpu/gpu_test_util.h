// Helpers for the GPU tests (tests/gpu): every CUDA kernel is checked against its CPU twin by
// calling the public kernel (kernels/<concept>.h) once on host tensors and once on the same
// values moved with Tensor::to(Device::cuda(0)), then comparing bit for bit where the two do
// the same arithmetic and within a stated error bound where they may not.
//
// Every test begins with
//   if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
// so the suite passes (skipped) on machines without a GPU or without a CUDA build.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../unit/kernel_test_util.h"
#include "core/device.h"
#include "core/device_runtime.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::gpu_test {

inline Device gpu() {
  return Device::cuda(0);
}

// A contiguous copy on GPU 0 / on the host. A GPU tensor must be contiguous to come back
// (Tensor::to copies bytes; make strided GPU views contiguous with kernels::copy first).
inline Tensor on_gpu(const Tensor& t) {
  return t.to(gpu());
}
inline Tensor on_cpu(const Tensor& t) {
  return t.to(Device::CPU);
}

// The float dtypes of the activations.
inline const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> all = {DType::F32, DType::BF16, DType::F16};
  return all;
}

// Unit roundoff of a float dtype: half the distance from 1 to the next value.
inline double unit_roundoff(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return std::ldexp(1.0, -24);
    case DType::BF16:
      return std::ldexp(1.0, -8);
    case DType::F16:
      return std::ldexp(1.0, -11);
    default:
      return 0.0;
  }
}

// Elements of t (any device; f32, f64, bf16, f16, i32, i64, u8) as doubles, in row-major order.
inline std::vector<double> to_double(const Tensor& t) {
  return test::to_double(on_cpu(t));
}

// Host tensors from doubles and uniform random ones (rounded to dtype; deterministic in seed):
// the kernel tests' helpers.
using test::from_double;
using test::random_tensor;

// Uniform integers in [lo, hi] as a host i32 tensor [n]; deterministic in seed.
inline Tensor random_ids(int64_t n, int32_t lo, int32_t hi, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = dist(gen);
  return Tensor::from_vector(v, {n});
}

// Raw bytes of t (any device, moved to the host and made contiguous).
inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor c = on_cpu(t);
  if (!c.is_contiguous()) c = c.clone();
  const auto* p = static_cast<const uint8_t*>(c.raw_data());
  return std::vector<uint8_t>(p, p + c.nbytes());
}

// Success when actual and expected have the same shape, dtype and bytes; else names the first
// differing element, its bits and the number of differing elements.
inline ::testing::AssertionResult same_bits(const Tensor& actual, const Tensor& expected) {
  if (actual.shape() != expected.shape() || actual.dtype() != expected.dtype())
    return ::testing::AssertionFailure()
           << "got " << actual.describe() << ", expected " << expected.describe();
  const std::vector<uint8_t> a = bytes_of(actual), e = bytes_of(expected);
  const size_t elem = dtype_size(expected.dtype());
  int64_t first = -1, differing = 0;
  for (size_t i = 0; i < a.size(); i += elem)
    if (std::memcmp(&a[i], &e[i], elem) != 0) {
      if (first < 0) first = int64_t(i / elem);
      ++differing;
    }
  if (first < 0) return ::testing::AssertionSuccess();
  auto hex = [&](const std::vector<uint8_t>& bytes) {
    std::ostringstream os;
    os << "0x" << std::hex << std::setfill('0');
    for (size_t b = elem; b-- > 0;) os << std::setw(2) << int(bytes[size_t(first) * elem + b]);
    return os.str();
  };
  const std::vector<double> ad = to_double(actual), ed = to_double(expected);
  return ::testing::AssertionFailure()
         << differing << " of " << a.size() / elem << " " << dtype_name(expected.dtype())
         << " elements differ; first at flat index " << first << ": got " << hex(a) << " ("
         << std::setprecision(17) << ad[size_t(first)] << "), expected " << hex(e) << " ("
         << ed[size_t(first)] << ")";
}

// Success when |actual[i] − expected[i]| <= tolerance[i] for every i (NaN fails).
inline ::testing::AssertionResult within(const std::vector<double>& actual,
                                         const std::vector<double>& expected,
                                         const std::vector<double>& tolerance) {
  if (actual.size() != expected.size() || tolerance.size() != expected.size())
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " actual, " << expected.size() << " expected, "
           << tolerance.size() << " tolerances";
  int64_t worst = -1, failing = 0;
  double worst_ratio = 0.0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double err = std::abs(actual[i] - expected[i]);
    if (err <= tolerance[i]) continue;  // NaN compares false: fails
    ++failing;
    const double ratio = tolerance[i] > 0 ? err / tolerance[i] : INFINITY;
    if (worst < 0 || !(ratio <= worst_ratio)) {
      worst = int64_t(i);
      worst_ratio = ratio;
    }
  }
  if (failing == 0) return ::testing::AssertionSuccess();
  const size_t w = size_t(worst);
  return ::testing::AssertionFailure()
         << failing << " of " << expected.size() << " elements outside tolerance; worst at "
         << worst << ": got " << std::setprecision(17) << actual[w] << ", expected " << expected[w]
         << ", tolerance " << tolerance[w];
}

// Tolerance atol + rtol·|expected| per element.
inline ::testing::AssertionResult close(const std::vector<double>& actual,
                                        const std::vector<double>& expected, double atol,
                                        double rtol) {
  std::vector<double> tol(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) tol[i] = atol + rtol * std::abs(expected[i]);
  return within(actual, expected, tol);
}

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace megatron::gpu_test
