// Philox4x32-10: the counter-based RNG of Salmon et al. (SC'11), the same function as
// cuRAND's Philox generator.
//
// A PhiloxStream is (seed, key); draw i is a pure function of (seed, key, i), so any element
// of any mask or weight can be regenerated independently, in any order, on any rank. The
// mapping matches cuRAND's curand_init(seed, subsequence = key, offset = i): the Philox key
// is the 64-bit seed, counter words 0-1 are the block number i / 4, words 2-3 are the key.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

namespace megatron {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The raw 10-round block function: 128 random bits per (counter, key).
PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint64_t key) : seed_(seed), key_(key) {}

  // The 4 words of block `block` (draws 4·block .. 4·block+3).
  PhiloxCounter block(uint64_t block) const;
  uint32_t u32(uint64_t i) const { return block(i / 4)[i % 4]; }
  // Uniform in [0, 1) with 24 random bits: (u32 >> 8) · 2^-24. Dropout keeps when >= p.
  float uniform(uint64_t i) const { return float(u32(i) >> 8) * (1.0f / 16777216.0f); }
  // Standard normal number i, by Box-Muller on the first two words of block i / 2
  // (even i takes the cosine branch, odd i the sine branch).
  float normal(uint64_t i) const;

  uint64_t seed() const { return seed_; }
  uint64_t key() const { return key_; }

 private:
  uint64_t seed_;
  uint64_t key_;
};

// Combines the fields of a logical position (parameter id, layer, site, sample, ...) into one
// 64-bit stream key (splitmix64 chaining; distinct tuples collide with probability ~2^-64).
uint64_t philox_key(std::initializer_list<uint64_t> fields);

}  // namespace megatron
