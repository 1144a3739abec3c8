// MockGptDataset: deterministic, in range, a pure function of (seed, index).
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/philox.h"
#include "data/mock_gpt_dataset.h"

namespace megatron {
namespace {

TEST(MockGptDataset, TokensAreAPhiloxRandomWalk) {
  MockGptDataset d(100, 16, 50, 7);
  EXPECT_EQ(d.size(), 100);
  EXPECT_EQ(d.seq_length(), 16);
  std::vector<int32_t> t;
  d.sample(42, t);
  ASSERT_EQ(t.size(), 17u);
  PhiloxStream ref(7, philox_key({42}));
  EXPECT_EQ(t[0], int32_t(ref.u32(0) % 50));
  for (size_t j = 1; j < t.size(); ++j) {
    EXPECT_EQ(t[j], int32_t((t[j - 1] + 1 + ref.u32(j) % 3) % 50)) << j;
    EXPECT_GE(t[j], 0);
    EXPECT_LT(t[j], 50);
  }
}

TEST(MockGptDataset, DifferentIndicesAndSeedsDiffer) {
  MockGptDataset a(10, 32, 1000, 1), b(10, 32, 1000, 2);
  std::vector<int32_t> x, y, z;
  a.sample(3, x);
  a.sample(4, y);
  b.sample(3, z);
  EXPECT_NE(x, y);
  EXPECT_NE(x, z);
  a.sample(3, y);
  EXPECT_EQ(x, y);
}

TEST(MockGptDataset, RejectsBadArguments) {
  EXPECT_THROW(MockGptDataset(10, 8, 0, 1), Error);
  MockGptDataset d(10, 8, 5, 1);
  std::vector<int32_t> t;
  EXPECT_THROW(d.sample(10, t), Error);
}

}  // namespace
}  // namespace megatron
