// Philox4x32-10 for kPhiloxLanes consecutive blocks at once, one block per lane, written as
// loops over lanes so that each round becomes a few vector instructions. It is the function
// of core/philox.h (philox4x32_10 / PhiloxStream::block), only evaluated 8 blocks at a time;
// the dropout tests compare masks with PhiloxStream draw by draw. Dropout masks for attention
// probabilities are the largest random draw of a step, and the scalar version took ~8 ns per
// element.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace megatron::kernels::cpu {

constexpr int64_t kPhiloxLanes = 8;  // one AVX2 register of 32-bit words

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
  // Round keys up front, and all ten rounds unrolled, so the lane state stays in registers.
  uint32_t k0[10], k1[10];
  k0[0] = uint32_t(seed);
  k1[0] = uint32_t(seed >> 32);
  for (int round = 1; round < 10; ++round) {
    k0[round] = k0[round - 1] + kWeyl0;
    k1[round] = k1[round - 1] + kWeyl1;
  }
#ifdef __AVX2__
  // GCC vectorises the portable loop below poorly (the 32x32->64 products go through
  // shuffles); with AVX2 each round is two even/odd vpmuludq pairs and blends.
  __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c0));
  __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c1));
  __m256i v2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c2));
  __m256i v3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c3));
  const __m256i m0 = _mm256_set1_epi32(int(kMul0)), m1 = _mm256_set1_epi32(int(kMul1));
  for (int round = 0; round < 10; ++round) {
    // 64-bit products of the even lanes and of the odd lanes (shifted down), then the low
    // and high 32-bit halves of all 8 products.
    const __m256i p0e = _mm256_mul_epu32(v0, m0);
    const __m256i p0o = _mm256_mul_epu32(_mm256_srli_epi64(v0, 32), m0);
    const __m256i p1e = _mm256_mul_epu32(v2, m1);
    const __m256i p1o = _mm256_mul_epu32(_mm256_srli_epi64(v2, 32), m1);
    const __m256i lo0 = _mm256_blend_epi32(p0e, _mm256_slli_epi64(p0o, 32), 0xAA);
    const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(p0e, 32), p0o, 0xAA);
    const __m256i lo1 = _mm256_blend_epi32(p1e, _mm256_slli_epi64(p1o, 32), 0xAA);
    const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(p1e, 32), p1o, 0xAA);
    v0 = _mm256_xor_si256(_mm256_xor_si256(hi1, v1), _mm256_set1_epi32(int(k0[round])));
    v2 = _mm256_xor_si256(_mm256_xor_si256(hi0, v3), _mm256_set1_epi32(int(k1[round])));
    v1 = lo1;
    v3 = lo0;
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(c0), v0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(c1), v1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(c2), v2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(c3), v3);
#else
#pragma omp simd
  for (int64_t l = 0; l < kPhiloxLanes; ++l) {
#pragma GCC unroll 10
    for (int round = 0; round < 10; ++round) {
      const uint64_t p0 = uint64_t(kMul0) * c0[l];
      const uint64_t p1 = uint64_t(kMul1) * c2[l];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0[round];
      const uint32_t n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1[round];
      c0[l] = n0;
      c1[l] = uint32_t(p1);
      c2[l] = n2;
      c3[l] = uint32_t(p0);
    }
  }
#endif
  for (int64_t l = 0; l < kPhiloxLanes; ++l) {
    words[4 * l + 0] = c0[l];
    words[4 * l + 1] = c1[l];
    words[4 * l + 2] = c2[l];
    words[4 * l + 3] = c3[l];
  }
}

}  // namespace megatron::kernels::cpu
