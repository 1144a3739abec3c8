// Helpers for the GPU kernel tests of layernorm, gelu, bias_add, bias_tanh, dropout, softmax and
// cross-entropy: random host tensors, GPU-vs-CPU comparison (within a tolerance, or bit for bit),
// and the f16 route.
//
// Each test runs the CPU twin on host tensors and the same public kernel on copies moved with
// Tensor::to(Device::cuda(0)), then compares. The public contracts accept f32 and bf16; the CUDA
// backend also takes f16, which the tests reach by calling kernels::cuda:: directly
// (MT_GPU_KERNEL) and compare against the CPU twin run in f32 on the same (exactly widened)
// values.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/device_runtime.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "gpu_test_util.h"  // gpu(), on_gpu, to_double, from_double, random_tensor
#ifdef MEGATRON_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace megatron::gpu_test {

// The dtype the CPU twin runs in for a GPU dtype: f16 (not a CPU activation dtype) runs as f32.
inline DType cpu_dtype(DType gpu_dtype) {
  return gpu_dtype == DType::F16 ? DType::F32 : gpu_dtype;
}

// A host copy of t in cpu_dtype(t.dtype()) (f16 -> f32 is exact); undefined stays undefined.
inline Tensor for_cpu(const Tensor& t) {
  if (!t.defined()) return Tensor();
  Tensor h = t.to(Device::CPU);
  if (h.dtype() != DType::F16) return h.clone();  // never shares memory with t
  return from_double(to_double(h), h.shape(), DType::F32);
}

// Elementwise |gpu − cpu| <= atol + rtol·|cpu|; NaN must meet NaN and ±inf the same inf.
// The message names the worst element.
inline ::testing::AssertionResult close(const Tensor& gpu_result, const Tensor& cpu_result,
                                        double atol, double rtol) {
  if (gpu_result.shape() != cpu_result.shape())
    return ::testing::AssertionFailure()
           << "shapes differ: " << gpu_result.describe() << " vs " << cpu_result.describe();
  const std::vector<double> g = to_double(gpu_result), c = to_double(cpu_result);
  double worst = 0.0;
  size_t worst_i = 0;
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double ratio;
    if (g[i] == c[i])  // also 0 == 0 with atol 0, and equal infinities
      ratio = 0.0;
    else if (std::isnan(c[i]) || std::isnan(g[i]))
      ratio = std::isnan(c[i]) && std::isnan(g[i]) ? 0.0 : INFINITY;
    else if (std::isinf(c[i]) || std::isinf(g[i]))
      ratio = g[i] == c[i] ? 0.0 : INFINITY;
    else
      ratio = std::abs(g[i] - c[i]) / (atol + rtol * std::abs(c[i]));
    if (ratio > 1.0) ++bad;
    if (ratio > worst) {
      worst = ratio;
      worst_i = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << g.size() << " elements outside atol " << atol << " + rtol " << rtol
         << "; worst at flat index " << worst_i << ": gpu " << g[worst_i] << " vs cpu "
         << c[worst_i] << " (" << worst << "x the tolerance)";
}

// Same shape, dtype and bytes (device copies brought to the host).
inline ::testing::AssertionResult bit_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure() << a.describe() << " vs " << b.describe();
  Tensor ha = a.to(Device::CPU), hb = b.to(Device::CPU);
  if (!ha.is_contiguous()) ha = ha.clone();
  if (!hb.is_contiguous()) hb = hb.clone();
  const size_t es = dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(ha.raw_data());
  const auto* pb = static_cast<const unsigned char*>(hb.raw_data());
  size_t bad = 0, first = 0;
  for (int64_t i = 0; i < ha.numel(); ++i)
    if (std::memcmp(pa + size_t(i) * es, pb + size_t(i) * es, es) != 0 && bad++ == 0)
      first = size_t(i);
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << ha.numel() << " elements differ; first at flat index " << first;
}

// Tolerance of an activation-dtype output computed in f32 by both sides with sums in another
// order: f32 to a few ulp; a 16-bit result may land one rounding step away.
inline double out_rtol(DType dtype) {
  switch (dtype) {
    case DType::BF16:
      return 1.0 / 128;  // two bf16 ulps
    case DType::F16:
      return 1.0 / 512;  // two f16 ulps (against the unrounded f32 CPU result)
    default:
      return 1e-5;
  }
}

// Absolute tolerance beside out_rtol for a 16-bit result compared with the unrounded f32 CPU
// result: f16 is subnormal below 2^-14, where its rounding step is a fixed 2^-24 and no
// relative bound holds (bf16 has f32's exponent range: no such values here).
inline double out_atol(DType dtype) {
  return dtype == DType::F16 ? std::ldexp(1.0, -24) : 0.0;
}

// Absolute tolerance of an f32 sum over `rows` terms of magnitude <= ~1 taken in another order
// than the CPU's (a column gradient): rounding grows with the row count; a wrong term is O(1).
inline double sum_atol(int64_t rows) {
  return 1e-5 + 1e-6 * double(rows);
}

inline std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

}  // namespace megatron::gpu_test

// MT_GPU_KERNEL(dtype, fn, args...): kernels::fn(args...) through the public contract for f32 and
// bf16; kernels::cuda::fn(args...) (the backend, which also takes f16) for f16.
#ifdef MEGATRON_CUDA
#define MT_GPU_KERNEL(dtype, fn, ...)                                             \
  ((dtype) == ::megatron::DType::F16 ? ::megatron::kernels::cuda::fn(__VA_ARGS__) \
                                     : ::megatron::kernels::fn(__VA_ARGS__))
#else
#define MT_GPU_KERNEL(dtype, fn, ...) ::megatron::kernels::fn(__VA_ARGS__)
#endif

#define MT_GPU_DTYPES ::testing::Values(DType::F32, DType::BF16, DType::F16)
