// MockGptDataset: shape, range, the count-up pattern and determinism.
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "data/mock_gpt_dataset.h"

namespace megatron {
namespace {

TEST(DataMockGptDataset, SamplesCountUpFromASeededStart) {
  MockGptDataset a(100, 16, 50, 3), b(100, 16, 50, 3), c(100, 16, 50, 4);
  std::vector<int32_t> x, y;
  std::set<int32_t> starts;
  int differ = 0;
  for (int64_t i = 0; i < 100; ++i) {
    a.sample(i, x);
    ASSERT_EQ(x.size(), 17u);
    for (size_t k = 1; k < x.size(); ++k) ASSERT_EQ(x[k], (x[k - 1] + 1) % 50);
    b.sample(i, y);
    EXPECT_EQ(x, y);
    c.sample(i, y);
    differ += x != y;
    starts.insert(x[0]);
  }
  EXPECT_GT(differ, 90);
  EXPECT_GT(starts.size(), 40u);  // 100 draws from 50 values cover most of them
  EXPECT_THROW(a.sample(100, x), Error);
  EXPECT_THROW(MockGptDataset(1, 0, 50, 1), Error);
}

}  // namespace
}  // namespace megatron
