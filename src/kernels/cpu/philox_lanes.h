// Philox4x32-10 for kPhiloxLanes consecutive blocks at once, one block per lane, written as
// loops over lanes so that each round becomes a few vector instructions. It is the function
// of core/philox.h (philox4x32_10 / PhiloxStream::block), only evaluated 8 blocks at a time;
// the dropout tests compare masks with PhiloxStream draw by draw. Dropout masks for attention
// probabilities are the largest random draw of a step, and the scalar version took ~8 ns per
// element.
#pragma once

#include <cstdint>

namespace megatron::kernels::cpu {

constexpr int64_t kPhiloxLanes = 8;

// words[4·l + w] = word w of block (first_block + l) of the stream (seed, key), l < 8.
inline void philox_blocks(uint64_t seed, uint64_t key, uint64_t first_block,
                          uint32_t words[4 * kPhiloxLanes]) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0[kPhiloxLanes], c1[kPhiloxLanes], c2[kPhiloxLanes], c3[kPhiloxLanes];
  for (int64_t l = 0; l < kPhiloxLanes; ++l) {
    const uint64_t b = first_block + uint64_t(l);
    c0[l] = uint32_t(b);
    c1[l] = uint32_t(b >> 32);
    c2[l] = uint32_t(key);
    c3[l] = uint32_t(key >> 32);
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
#pragma omp simd
    for (int64_t l = 0; l < kPhiloxLanes; ++l) {
      const uint64_t p0 = uint64_t(kMul0) * c0[l];
      const uint64_t p1 = uint64_t(kMul1) * c2[l];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0;
      c1[l] = uint32_t(p1);
      c2[l] = n2;
      c3[l] = uint32_t(p0);
    }
  }
  for (int64_t l = 0; l < kPhiloxLanes; ++l) {
    words[4 * l + 0] = c0[l];
    words[4 * l + 1] = c1[l];
    words[4 * l + 2] = c2[l];
    words[4 * l + 3] = c3[l];
  }
}

}  // namespace megatron::kernels::cpu
