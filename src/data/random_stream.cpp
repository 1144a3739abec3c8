#include "data/random_stream.h"

#include "core/error.h"

namespace megatron {

uint32_t RandomStream::next_u32() {
  if (used_ == 4) {
    block_ = stream_.block(block_index_++);
    used_ = 0;
  }
  return block_[used_++];
}

uint64_t RandomStream::next_u64() {
  uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

uint64_t RandomStream::below(uint64_t n) {
  MT_CHECK(n >= 1, "RandomStream::below needs n >= 1");
  // Accept draws below the largest multiple of n that fits in 2^64, so each residue is
  // equally likely; fewer than half of the draws are ever rejected.
  const uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;
  uint64_t x;
  do {
    x = next_u64();
  } while (x > limit);
  return x % n;
}

double RandomStream::uniform() {
  return double(next_u64() >> 11) * 0x1.0p-53;
}

}  // namespace megatron
