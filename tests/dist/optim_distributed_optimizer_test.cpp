// The distributed optimizer's collectives (optim/distributed_optimizer.h) on the world as the
// DP group, with a flat space of 13 elements (not divisible by 2 or 4, so the last shard is
// short): shards tile [0, n); the all-gather gives every rank every shard. (The reduce-scatter
// into the shards: optim_grad_buckets_test.)
#include <gtest/gtest.h>

#include <vector>

#include "mpi_test_util.h"
#include "optim/distributed_optimizer.h"

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

// A store of two parameters, 5 + 8 = kTotal elements, its values allocated padded for `d`.
void register_two_parameters(ParameterStore& store) {
  store.add({"a", {5}});
  store.add({"b", {2, 4}});
}

TEST(DistributedOptimizer, AllGatherGivesEveryRankEveryShardInPlace) {
  auto dp = test::world();
  const int d = dp->size(), r = dp->rank();
  ParameterStore store(0, 1);
  register_two_parameters(store);
  store.allocate(d);
  ASSERT_EQ(store.flat_values().numel(), kTotal);
  ASSERT_EQ(store.padded_flat_values().numel() % d, 0);
  const DpShard shard = DpShard::of(kTotal, d, r);
  // Inside its shard each rank holds the true values, elsewhere its own junk.
  std::vector<float> v(static_cast<size_t>(kTotal), float(-100 - r));
  for (int64_t i = shard.range.begin; i < shard.range.end; ++i) v[size_t(i)] = float(i) * 3.0f;
  store.flat_values().copy_from(Tensor::from_vector(v, {kTotal}));
  const void* storage = store.flat_values().raw_data();
  all_gather_shards(store, *dp, shard);
  EXPECT_EQ(store.flat_values().raw_data(), storage);
  const std::vector<float> got = store.flat_values().to_vector<float>();
  for (int64_t i = 0; i < kTotal; ++i)
    EXPECT_EQ(got[size_t(i)], float(i) * 3.0f) << "element " << i;
  EXPECT_EQ(store.get("b").value.to_vector<float>()[0], 15.0f);
}

TEST(DistributedOptimizer, AllGatherRefusesAnUnpaddedStore) {
  auto dp = test::world();
  if (dp->size() == 1 || kTotal % dp->size() == 0) GTEST_SKIP() << "needs 13 % DP size != 0";
  ParameterStore store(0, 1);
  register_two_parameters(store);
  store.allocate();
  const DpShard shard = DpShard::of(kTotal, dp->size(), dp->rank());
  EXPECT_THROW(all_gather_shards(store, *dp, shard), Error);
}

}  // namespace
}  // namespace megatron
