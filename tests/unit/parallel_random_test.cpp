// Dropout keying (parallel/random.h): the rows a TP shard or a micro-batch draws are exactly
// the matching rows of the unsplit tensor, and the keys follow the documented formula.
#include <gtest/gtest.h>

#include "core/philox.h"
#include "parallel/random.h"

namespace megatron {
namespace {

bool same(const kernels::MaskRow& a, const kernels::MaskRow& b) {
  return a.key == b.key && a.counter_base == b.counter_base;
}

TEST(ParallelRandom, AttentionRowsOfAHeadShardEqualTheFullRows) {
  const DropoutScope scope{true, 1, 9, 100};
  const int64_t b = 3, heads = 4, s = 5;
  const auto full = attention_dropout_rows(scope, 2, b, 0, heads, s);  // [b, 4 heads, s]
  const auto shard = attention_dropout_rows(scope, 2, b, 2, 2, s);     // heads 2-3 (rank 1 of 2)
  for (int64_t r = 0; r < b; ++r)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t q = 0; q < s; ++q)
        EXPECT_TRUE(same(shard[(r * 2 + j) * s + q], full[(r * heads + 2 + j) * s + q]));
  EXPECT_EQ(full[(1 * heads + 3) * s + 2].key, philox_key({9, 101, 2, 2, 3}));
  EXPECT_EQ(full[(1 * heads + 3) * s + 2].counter_base, uint64_t(2 * s));
  EXPECT_NE(full[0].key, full[s].key);  // heads differ
}

TEST(ParallelRandom, HiddenRowsOfAMicroBatchEqualTheFullBatchRows) {
  const int64_t s = 4, h = 6;
  const auto full = hidden_dropout_rows({true, 1, 3, 10}, 1, DropoutSite::kMlpOutput, s, 4, h);
  const auto second_half =
      hidden_dropout_rows({true, 1, 3, 12}, 1, DropoutSite::kMlpOutput, s, 2, h);
  for (int64_t pos = 0; pos < s; ++pos)
    for (int64_t r = 0; r < 2; ++r)
      EXPECT_TRUE(same(second_half[pos * 2 + r], full[pos * 4 + 2 + r]));
  EXPECT_EQ(full[3 * 4 + 1].key, philox_key({3, 11, 1, uint64_t(DropoutSite::kMlpOutput)}));
  EXPECT_EQ(full[3 * 4 + 1].counter_base, uint64_t(3 * h));
}

}  // namespace
}  // namespace megatron
