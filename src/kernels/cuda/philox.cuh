// Philox4x32-10 and the dropout keep rule for the CUDA kernels (internal to src/kernels/cuda).
//
// Bit-for-bit the function of core/philox.h (philox4x32_10 / PhiloxStream::block) and of
// kernels/cpu/dropout.cpp: key = the 64-bit seed, counter words 0-1 = the block number
// (draw index / 4), words 2-3 = the stream key; ten rounds, the key bumped by the Weyl
// constants before rounds 1..9. The functions are __host__ __device__ so that the host can
// check them against core/philox.cpp without a GPU; on the device the 64-bit product compiles
// to mul.lo/mul.hi.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace megatron::kernels::cuda {

struct PhiloxWords {
  uint32_t w[4];
};

__host__ __device__ __forceinline__ PhiloxWords philox4x32_10(uint64_t seed, uint64_t key,
                                                              uint64_t block) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = uint32_t(block), c1 = uint32_t(block >> 32);
  uint32_t c2 = uint32_t(key), c3 = uint32_t(key >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    const uint64_t p0 = uint64_t(kMul0) * c0;  // c0 · M0: lo0, hi0
    const uint64_t p1 = uint64_t(kMul1) * c2;  // c2 · M1: lo1, hi1
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = uint32_t(p1);
    c2 = n2;
    c3 = uint32_t(p0);
  }
  return {{c0, c1, c2, c3}};
}

// Keep iff (u32 >> 8) >= threshold with threshold = ceil(p · 2^24): exactly
// PhiloxStream::uniform(i) >= p (uniform = (u32 >> 8) · 2^-24), computed as the CPU does.
inline uint32_t dropout_keep_threshold(float p) {
  const double scaled = double(p) * 16777216.0;
  uint32_t threshold = uint32_t(scaled);
  if (double(threshold) < scaled) ++threshold;
  return threshold;
}

// Mask bytes of one Philox block of one row: row draws counter_base + c for c < cols; this is
// block counter_base / 4 + kb (kb < dropout_blocks_per_row(cols)), whose word q is draw
// 4·block + q, i.e. column 4·block + q − counter_base (modulo 2^64: words before the row's first
// draw wrap to a huge column and are skipped, as are words past its last).
__host__ __device__ __forceinline__ void dropout_mask_block(uint64_t seed, uint64_t key,
                                                            uint64_t counter_base, int64_t kb,
                                                            int64_t cols, uint32_t threshold,
                                                            uint8_t* mask_row) {
  const uint64_t block = counter_base / 4 + uint64_t(kb);
  const PhiloxWords words = philox4x32_10(seed, key, block);
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int q = 0; q < 4; ++q) {
    const uint64_t col = block * 4 + uint64_t(q) - counter_base;
    if (col < uint64_t(cols)) mask_row[col] = uint8_t((words.w[q] >> 8) >= threshold);
  }
}

// Philox blocks that cover `cols` consecutive draws starting anywhere: at most
// ⌊(3 + cols + 3) / 4⌋ (first draw at word 3 of its block).
__host__ __device__ __forceinline__ int64_t dropout_blocks_per_row(int64_t cols) {
  return (cols + 6) / 4;
}

}  // namespace megatron::kernels::cuda
