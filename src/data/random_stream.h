// RandomStream: a sequential, seeded, platform-independent random source for the datasets
// (shuffles, BERT sample construction). It reads the Philox4x32-10 stream (seed, key) of
// core/philox.h word after word, so results are identical on every machine and compiler —
// unlike std::uniform_int_distribution, whose algorithm is implementation-defined. This is
// where we differ from Megatron on purpose: Megatron shuffles with numpy's RandomState
// (MT19937); we use Philox, so the sample order differs from Megatron's but has the same
// distribution and is just as reproducible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/philox.h"

namespace megatron {

class RandomStream {
 public:
  RandomStream(uint64_t seed, uint64_t key) : stream_(seed, key) {}

  uint32_t next_u32();
  uint64_t next_u64();
  // Uniform in [0, n), n >= 1, without modulo bias (rejection sampling).
  uint64_t below(uint64_t n);
  // Uniform in [0, 1) with 53 random bits.
  double uniform();

  // Fisher-Yates: every permutation equally likely.
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }

 private:
  PhiloxStream stream_;
  uint64_t block_index_ = 0;
  PhiloxCounter block_{};
  int used_ = 4;  // words of block_ already consumed
};

}  // namespace megatron
