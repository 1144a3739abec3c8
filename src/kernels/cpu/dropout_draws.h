// Drawing one row of a dropout mask from Philox (contract: kernels/dropout.h): shared by the
// dropout mask kernel and the fused attention, which draws the same mask tile by tile, so both
// keep exactly the same elements.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/philox_lanes.h"

namespace megatron::kernels::cpu {

// Keep iff (u32 >> 8) · 2^-24 >= p, i.e. iff (u32 >> 8) >= ceil(p · 2^24): comparing integers
// gives exactly PhiloxStream::uniform(i) >= p without a float per draw.
inline uint32_t keep_threshold(float p) {
  const double scaled = double(p) * 16777216.0;
  uint32_t threshold = uint32_t(scaled);
  if (double(threshold) < scaled) ++threshold;
  return threshold;
}

// keep[c] = 1 when draw base + c of the stream (seed, key) is kept, for c in [0, cols).
inline void draw_keep_row(uint64_t seed, uint64_t key, uint64_t base, int64_t cols,
                          uint32_t threshold, uint8_t* keep) {
  // Draw i = base + c lives in block i / 4, word i % 4; take kPhiloxLanes blocks at a time
  // (8 with AVX2, 64 with AVX-512).
  constexpr int64_t kDraws = 4 * kPhiloxLanes;
  uint32_t words[kDraws];
  for (uint64_t block = base / 4; block * 4 < base + uint64_t(cols); block += kPhiloxLanes) {
    philox_blocks(seed, key, block, words);
    const uint64_t first = block * 4;  // draw index of words[0]
    const int64_t c0 = first > base ? int64_t(first - base) : 0;
    const int64_t c1 = std::min<int64_t>(cols, int64_t(first + kDraws - base));
#pragma omp simd
    for (int64_t c = c0; c < c1; ++c)
      keep[c] = uint8_t((words[base + uint64_t(c) - first] >> 8) >= threshold);
  }
}

}  // namespace megatron::kernels::cpu
