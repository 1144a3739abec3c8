// Warp reductions for the CUDA kernels (internal to src/kernels/cuda): a butterfly over the 32
// lanes (__shfl_xor_sync), so every lane ends with the same bits and the order of the additions
// is fixed by the lane numbers — deterministic. Its own header, free of kernel launches, so that
// device code that needs only these can be compiled by a host compiler (tests/simt).
#pragma once

#include <cmath>

namespace megatron::kernels::cuda {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// NaN-skipping max, like the CPU's max_reduce (`v > m ? v : m` never picks a NaN over a number).
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, m));
  return v;
}

}  // namespace megatron::kernels::cuda
