// f32 <-> bf16 / f16 conversions written on the bits, identical to the host's bf16::from_float,
// f16::from_float and f16::to_float (core/dtype.h) for every input, NaN payloads included
// (internal to src/kernels/cuda).
//
// The hardware conversions behind cuda_common.cuh's to_f32/from_f32 round to nearest even too,
// but turn NaNs into the canonical NaN while the host keeps sign and payload, and whether they
// keep subnormals is the instruction's business. Kernels that promise the CPU's bits (cast,
// fill, scale, the K = 0 GEMM, the embedding backward's loads) use these instead: a few integer
// operations per element of a memory-bound kernel.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace megatron::kernels::cuda {

__device__ __forceinline__ float exact_to_f32(float x) {
  return x;
}
__device__ __forceinline__ float exact_to_f32(__nv_bfloat16 x) {
  return __uint_as_float(uint32_t(__bfloat16_as_ushort(x)) << 16);
}
__device__ __forceinline__ float exact_to_f32(__half x) {
  const uint32_t h = __half_as_ushort(x);
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (mant << 13));  // inf, NaN
  if (exp == 0) {
    // Zero or subnormal: mant · 2^-24, exact in f32 (a normal number unless mant is 0).
    return __uint_as_float(sign | __float_as_uint(float(mant) * 0x1p-24f));
  }
  return __uint_as_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

template <typename T>
__device__ __forceinline__ T exact_from_f32(float f);
template <>
__device__ __forceinline__ float exact_from_f32<float>(float f) {
  return f;
}
template <>
__device__ __forceinline__ __nv_bfloat16 exact_from_f32<__nv_bfloat16>(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t bits = (u & 0x7fffffffu) > 0x7f800000u
                            ? (u >> 16) | 0x40u                        // quiet NaN
                            : (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  // nearest even
  return __ushort_as_bfloat16(uint16_t(bits));
}
template <>
__device__ __forceinline__ __half exact_from_f32<__half>(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint32_t sign = (x >> 16) & 0x8000u, abs = x & 0x7fffffffu;
  uint32_t r;
  if (abs >= 0x7f800000u) {
    r = sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);  // inf, or quiet NaN
  } else if (abs >= 0x477ff000u) {
    r = sign | 0x7c00u;            // rounds to >= 65520: inf
  } else if (abs < 0x38800000u) {  // subnormal or zero in f16
    if (abs < 0x33000000u) {
      r = sign;  // below half the smallest subnormal
    } else {
      const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      const int shift = 126 - int(abs >> 23);  // bits to drop so that 2^-24 is the unit
      const uint32_t half = 1u << (shift - 1), rem = mant & ((1u << shift) - 1);
      uint32_t q = mant >> shift;
      if (rem > half || (rem == half && (q & 1u))) ++q;
      r = sign | q;
    }
  } else {
    uint32_t q = (abs - 0x38000000u) >> 13;
    const uint32_t rem = abs & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
    r = sign | q;
  }
  return __ushort_as_half(uint16_t(r));
}

}  // namespace megatron::kernels::cuda
