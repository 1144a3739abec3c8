// The distributed optimizer's collectives (train/distributed_optimizer.h) on the world as the
// DP group, with a flat space of 13 elements (not divisible by 2 or 4, so the last shard is
// short): shards tile [0, n); the all-gather gives every rank every shard. (The reduce-scatter
// into the shards: grad_buckets_test.)
#include "train/distributed_optimizer.h"

#include <gtest/gtest.h>

#include <vector>

#include "mpi_test_util.h"

namespace megatron {
namespace {

constexpr int64_t kTotal = 13;

TEST(DistributedOptimizer, ShardsTileTheFlatSpace) {
  for (int d : {1, 2, 3, 4, 16}) {
    int64_t next = 0;
    for (int r = 0; r < d; ++r) {
      const DpShard s = DpShard::of(kTotal, d, r);
      EXPECT_EQ(s.size, (kTotal + d - 1) / d);
      EXPECT_EQ(s.range.begin, next) << "d=" << d << " r=" << r;
      EXPECT_LE(s.range.end - s.range.begin, s.size);
      next = s.range.end;
    }
    EXPECT_EQ(next, kTotal) << "d=" << d;
  }
}

TEST(DistributedOptimizer, AllGatherGivesEveryRankEveryShard) {
  auto dp = test::world();
  const int d = dp->size(), r = dp->rank();
  const DpShard shard = DpShard::of(kTotal, d, r);
  // Inside its shard each rank holds the true values, elsewhere its own junk.
  std::vector<float> v(static_cast<size_t>(kTotal), float(-100 - r));
  for (int64_t i = shard.range.begin; i < shard.range.end; ++i) v[size_t(i)] = float(i) * 3.0f;
  Tensor flat = Tensor::from_vector(v, {kTotal});
  all_gather_shards(flat, *dp, shard);
  const std::vector<float> got = flat.to_vector<float>();
  for (int64_t i = 0; i < kTotal; ++i)
    EXPECT_EQ(got[size_t(i)], float(i) * 3.0f) << "element " << i;
}

}  // namespace
}  // namespace megatron
