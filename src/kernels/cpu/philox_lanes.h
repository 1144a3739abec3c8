// Philox4x32-10 for kPhiloxLanes consecutive blocks at once, one block per lane, written as
// loops over lanes so that each round becomes a few vector instructions. It is the function
// of core/philox.h (philox4x32_10 / PhiloxStream::block), only evaluated 8 (AVX2) or 64
// (AVX-512) blocks at a time; the dropout tests compare masks with PhiloxStream draw by draw.
// Dropout masks for attention probabilities are the largest random draw of a step, and the
// scalar version took ~8 ns per element. Which path is chosen at compile time (the build's
// -march, CMake's MEGATRON_MARCH): every path returns the same words.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace megatron::kernels::cpu {

constexpr uint32_t kPhiloxMul0 = 0xD2511F53u, kPhiloxMul1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9u, kPhiloxWeyl1 = 0xBB67AE85u;

#ifdef __AVX512F__
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which -Wall reports as
// uninitialised once inlined (GCC bug 105593); the values are always overwritten.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// Four independent groups of 16 blocks per call: one group's ten rounds are a chain of
// dependent multiplies and shuffles (latency bound, ~0.4 ns per draw on Zen 5); four chains
// interleaved keep the vector units busy (~0.1 ns per draw).
constexpr int64_t kPhiloxGroups = 4;
constexpr int64_t kPhiloxLanes = 16 * kPhiloxGroups;

// words[4·l + w] = word w of block (first_block + l) of the stream (seed, key), l < 64.
inline void philox_blocks(uint64_t seed, uint64_t key, uint64_t first_block,
                          uint32_t words[4 * kPhiloxLanes]) {
  // Counters of group g's 16 blocks: low words first_block + 16·g + l, high words carrying on
  // wrap; the key words are the same in every lane.
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i v0[kPhiloxGroups], v1[kPhiloxGroups], v2[kPhiloxGroups], v3[kPhiloxGroups];
  for (int64_t g = 0; g < kPhiloxGroups; ++g) {
    const uint64_t first = first_block + uint64_t(16 * g);
    const __m512i first_lo = _mm512_set1_epi32(int(uint32_t(first)));
    const __m512i first_hi = _mm512_set1_epi32(int(uint32_t(first >> 32)));
    v0[g] = _mm512_add_epi32(first_lo, lane);
    v1[g] = _mm512_mask_add_epi32(first_hi, _mm512_cmplt_epu32_mask(v0[g], first_lo), first_hi,
                                  _mm512_set1_epi32(1));
    v2[g] = _mm512_set1_epi32(int(uint32_t(key)));
    v3[g] = _mm512_set1_epi32(int(uint32_t(key >> 32)));
  }
  __m512i k0 = _mm512_set1_epi32(int(uint32_t(seed)));
  __m512i k1 = _mm512_set1_epi32(int(uint32_t(seed >> 32)));
  const __m512i m0 = _mm512_set1_epi32(int(kPhiloxMul0)), m1 = _mm512_set1_epi32(int(kPhiloxMul1));
  const __m512i weyl0 = _mm512_set1_epi32(int(kPhiloxWeyl0));
  const __m512i weyl1 = _mm512_set1_epi32(int(kPhiloxWeyl1));
  constexpr __mmask16 kEven = 0x5555, kOdd = 0xAAAA;
  constexpr _MM_PERM_ENUM kSwap = _MM_PERM_CDAB;  // swap the two words of every 64-bit lane
  for (int round = 0; round < 10; ++round) {
    for (int64_t g = 0; g < kPhiloxGroups; ++g) {
      // 64-bit products of the even lanes and of the odd lanes (moved down); one masked word
      // swap each gives the low and the high halves of all 16 products in lane order.
      const __m512i p0e = _mm512_mul_epu32(v0[g], m0);
      const __m512i p0o = _mm512_mul_epu32(_mm512_srli_epi64(v0[g], 32), m0);
      const __m512i p1e = _mm512_mul_epu32(v2[g], m1);
      const __m512i p1o = _mm512_mul_epu32(_mm512_srli_epi64(v2[g], 32), m1);
      const __m512i lo0 = _mm512_mask_shuffle_epi32(p0e, kOdd, p0o, kSwap);
      const __m512i hi0 = _mm512_mask_shuffle_epi32(p0o, kEven, p0e, kSwap);
      const __m512i lo1 = _mm512_mask_shuffle_epi32(p1e, kOdd, p1o, kSwap);
      const __m512i hi1 = _mm512_mask_shuffle_epi32(p1o, kEven, p1e, kSwap);
      v0[g] = _mm512_ternarylogic_epi32(hi1, v1[g], k0, 0x96);  // three-way xor
      v2[g] = _mm512_ternarylogic_epi32(hi0, v3[g], k1, 0x96);
      v1[g] = lo1;
      v3[g] = lo0;
    }
    k0 = _mm512_add_epi32(k0, weyl0);
    k1 = _mm512_add_epi32(k1, weyl1);
  }
  // Transpose [word][block] to [block][word]: within each 128-bit quarter q, t_j holds block
  // 4q + j; then gather the quarters so that each store is 4 consecutive blocks.
  for (int64_t g = 0; g < kPhiloxGroups; ++g) {
    const __m512i a0 = _mm512_unpacklo_epi32(v0[g], v1[g]),
                  a1 = _mm512_unpackhi_epi32(v0[g], v1[g]);
    const __m512i a2 = _mm512_unpacklo_epi32(v2[g], v3[g]),
                  a3 = _mm512_unpackhi_epi32(v2[g], v3[g]);
    const __m512i t0 = _mm512_unpacklo_epi64(a0, a2), t1 = _mm512_unpackhi_epi64(a0, a2);
    const __m512i t2 = _mm512_unpacklo_epi64(a1, a3), t3 = _mm512_unpackhi_epi64(a1, a3);
    const __m512i q01 = _mm512_shuffle_i32x4(t0, t1, 0x44),
                  q23 = _mm512_shuffle_i32x4(t2, t3, 0x44);
    const __m512i r01 = _mm512_shuffle_i32x4(t0, t1, 0xEE),
                  r23 = _mm512_shuffle_i32x4(t2, t3, 0xEE);
    uint32_t* w = words + 64 * g;  // blocks 16·g ... 16·g + 15
    _mm512_storeu_si512(w + 0, _mm512_shuffle_i32x4(q01, q23, 0x88));
    _mm512_storeu_si512(w + 16, _mm512_shuffle_i32x4(q01, q23, 0xDD));
    _mm512_storeu_si512(w + 32, _mm512_shuffle_i32x4(r01, r23, 0x88));
    _mm512_storeu_si512(w + 48, _mm512_shuffle_i32x4(r01, r23, 0xDD));
  }
}
#pragma GCC diagnostic pop
#else
constexpr int64_t kPhiloxLanes = 8;  // one AVX2 register of 32-bit words

// words[4·l + w] = word w of block (first_block + l) of the stream (seed, key), l < 8.
inline void philox_blocks(uint64_t seed, uint64_t key, uint64_t first_block,
                          uint32_t words[4 * kPhiloxLanes]) {
  constexpr uint32_t kMul0 = kPhiloxMul0, kMul1 = kPhiloxMul1;
  constexpr uint32_t kWeyl0 = kPhiloxWeyl0, kWeyl1 = kPhiloxWeyl1;
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
#endif

}  // namespace megatron::kernels::cpu
