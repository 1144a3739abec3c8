// Helpers shared by the CUDA kernels (internal to src/kernels/cuda): launch shapes, element
// access for f32/bf16/f16 with f32 arithmetic, dtype dispatch, and deterministic block sums.
//
// Every kernel reads 16-bit inputs into f32, computes in f32 (f64 where the contract says so)
// and rounds once on store with round-to-nearest-even, exactly as the CPU twin does
// (kernels/cpu/cpu_common.h), so CPU and GPU agree to the last bit wherever the arithmetic is
// the same.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/cuda_context.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace megatron::kernels::cuda {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  const int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65535 * 32 ? 65535 * 32 : b));
}

inline cudaStream_t stream() {
  return megatron::cuda::compute_stream();
}

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float f);
template <>
__device__ __forceinline__ float from_f32<float>(float f) {
  return f;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float f) {
  return __float2bfloat16_rn(f);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float f) {
  return __float2half_rn(f);
}

// The device element type of a DType: f32 -> float, bf16 -> __nv_bfloat16, f16 -> __half.
template <typename Fn>
void dispatch_float(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::F32:
      return fn(float{});
    case DType::BF16:
      return fn(__nv_bfloat16{});
    case DType::F16:
      return fn(__half{});
    default:
      MT_THROW(what, " has dtype ", dtype_name(dtype), ", expected f32, bf16 or f16");
  }
}

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

}  // namespace megatron::kernels::cuda
