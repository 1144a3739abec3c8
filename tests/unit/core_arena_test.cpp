// Arena: aligned bump allocation, growth, reset merging blocks, tensors outliving reset.
#include <gtest/gtest.h>

#include "core/arena.h"

namespace megatron {
namespace {

TEST(Arena, AllocationsAreAlignedAndDisjoint) {
  Arena arena(Device::CPU, 1024);
  Tensor a = arena.alloc({3}, DType::F32);  // 12 bytes -> one 64-byte slot
  Tensor b = arena.alloc({5, 5}, DType::BF16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw_data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.raw_data()) % 64, 0u);
  EXPECT_EQ(static_cast<char*>(b.raw_data()) - static_cast<char*>(a.raw_data()), 64);
  EXPECT_EQ(arena.used(), 128u);
  Tensor z = arena.zeros({7}, DType::F32);
  for (float v : z.to_vector<float>()) EXPECT_EQ(v, 0.f);
}

TEST(Arena, GrowsThenMergesToHighWaterOnReset) {
  Arena arena(Device::CPU, 256);
  for (int i = 0; i < 10; ++i) arena.alloc({64}, DType::F32);  // 256 bytes each
  EXPECT_EQ(arena.high_water(), 2560u);
  EXPECT_GE(arena.capacity(), 2560u);
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
  EXPECT_EQ(arena.capacity(), 2560u);  // one block of the high-water size
  // The second step fits entirely in the merged block: the same addresses come back.
  Tensor first = arena.alloc({64}, DType::F32);
  for (int i = 1; i < 10; ++i) arena.alloc({64}, DType::F32);
  EXPECT_EQ(arena.capacity(), 2560u);
  arena.reset();
  EXPECT_EQ(arena.alloc({64}, DType::F32).raw_data(), first.raw_data());
}

TEST(Arena, TensorKeepsItsBlockAliveAfterReset) {
  Tensor kept;
  {
    Arena arena(Device::CPU, 64);
    kept = arena.alloc({16}, DType::F32);
    arena.alloc({1000}, DType::F32);  // forces a second block
    arena.reset();                    // drops both blocks from the arena
    kept.data<float>()[15] = 3.f;     // still valid memory
  }
  EXPECT_EQ(kept.data<float>()[15], 3.f);
}

}  // namespace
}  // namespace megatron
