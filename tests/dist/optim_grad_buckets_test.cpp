// GradBuckets (optim/grad_buckets.h) on the world as the DP group: a "backward" of M
// micro-batches adds each rank's contributions to groups of parameters and announces each group
// when it adds its last contribution, as the transformer layers do. The reduced gradients (in
// place, or the distributed optimizer's shard's range, also in place) must equal a double-precision
// sum over ranks and micro-batches computed here, and be bit-identical with and without overlap;
// with overlap the buckets whose parameters are all announced must be launched before finish().
// With TP = world, the sequence-parallel parameters of each bucket are summed over TP. With
// expert parallelism, the expert parameters are summed over the expert data-parallel group only.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "distributed/parallel_state.h"
#include "forwarding_communicator.h"
#include "kernels/elementwise.h"
#include "mpi_test_util.h"
#include "optim/grad_buckets.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

// Seven parameters, 38 elements; "layers" announce parameters [1, 3), [3, 5) and [5, 7) (in
// reverse, as a backward does), parameter 0 (an "embedding") is never announced.
const std::vector<int64_t> kSizes = {5, 7, 3, 11, 2, 6, 4};
const std::vector<std::pair<size_t, size_t>> kLayers = {{1, 3}, {3, 5}, {5, 7}};
constexpr int64_t kBucketElements = 12;  // buckets [4, 7), [2, 4), [0, 2): across the layers
constexpr int kMicroBatches = 3;

// With `experts` > 0, parameters 3 and 4 are expert parameters of that many experts (full shape
// [experts, size], split over EP to [1, size]: the same local elements).
void add_params(ParameterStore& store, bool sequence_parallel = false, int64_t experts = 0) {
  for (size_t p = 0; p < kSizes.size(); ++p) {
    // The name is appended, not "p" + to_string: GCC 12 warns falsely (-Wrestrict) on that.
    std::string name = "p";
    name += std::to_string(p);
    ParamSpec spec{name, {kSizes[p]}, -1, true};
    spec.sequence_parallel = sequence_parallel && p % 2 == 1;
    if (experts > 0 && (p == 3 || p == 4)) {
      spec.full_shape = {experts, kSizes[p]};
      spec.expert = true;
    }
    store.add(spec);
  }
  store.allocate();
}

// Rank r's contribution to flat element i in micro-batch m: not exactly representable sums.
float contribution(int r, int m, int64_t i) {
  return float(std::sin(0.37 * double(i) + 1.3 * double(r) + 0.71 * double(m)) * 3.0);
}

// The same communicator, counting the non-blocking reductions posted on it.
class CountingCommunicator final : public test::ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  int posted = 0;

  std::unique_ptr<CommRequest> iall_reduce(Tensor& t, ReduceOp op) override {
    ++posted;
    return ForwardingCommunicator::iall_reduce(t, op);
  }
  std::unique_ptr<CommRequest> ireduce_scatter(Tensor& t, std::span<const int64_t> counts,
                                               ReduceOp op) override {
    ++posted;
    return ForwardingCommunicator::ireduce_scatter(t, counts, op);
  }
};

struct StepResult {
  std::vector<float> reduced;     // the flat gradients, or the (dense) shard's
  std::vector<float> flat;        // the flat gradients
  std::vector<int64_t> offsets;   // each parameter's flat offset (experts after the dense ones)
  std::vector<FlatRange> shards;  // with the distributed optimizer: the dense, the expert shard
  int posted_before_finish = 0, posted = 0;
};

// One step of kMicroBatches "backward" passes on this rank's contributions (rank `r` of the
// contribution function), reduced by GradBuckets over ps.dp_cp (wrapped to count).
StepResult run_step(ParallelState ps, int r, bool overlap, bool distributed_optimizer,
                    bool sequence_parallel = false) {
  auto counting = std::make_shared<CountingCommunicator>(ps.dp_cp);
  ps.dp = ps.dp_cp = counting;  // one group at CP 1: the gradients reduce over dp × cp
  ParameterStore store(ps.tp_rank, ps.tp_size);
  store.set_expert_grid(ps.ep_rank, ps.ep_size, ps.etp_rank, ps.etp_size);
  add_params(store, sequence_parallel, ps.ep_size > 1 ? ps.ep_size : 0);
  const int64_t n = store.flat_grads().numel();
  std::optional<DistributedShards> shards;
  if (distributed_optimizer) shards = DistributedShards::of(store, ps);
  EXPECT_TRUE(!shards || shards->experts || shards->dense.total == n);
  GradBuckets buckets(store, ps, kBucketElements, overlap, shards ? &*shards : nullptr);
  buckets.start(kMicroBatches, 0.5);
  float* g = store.flat_grads().data<float>();
  for (int m = 0; m < kMicroBatches; ++m) {
    for (size_t l = kLayers.size(); l-- > 0;) {
      const auto [first, end] = kLayers[l];
      for (size_t p = first; p < end; ++p) {
        const Parameter& param = store.params()[p];
        for (int64_t i = param.flat_offset; i < param.flat_offset + kSizes[p]; ++i)
          g[i] += contribution(r, m, i);
      }
      store.grads_accumulated(first, end);
    }
    for (int64_t i = 0; i < kSizes[0]; ++i) g[i] += contribution(r, m, i);
  }
  StepResult result;
  result.posted_before_finish = counting->posted;
  buckets.finish();
  result.posted = counting->posted;
  for (const Parameter& param : store.params()) result.offsets.push_back(param.flat_offset);
  result.flat = store.flat_grads().to_vector<float>();
  if (shards) result.shards.push_back(shards->dense.range);
  if (shards && shards->experts) result.shards.push_back(shards->experts->range);
  // With a shard its range of the gradients holds the reduced sums (in place).
  result.reduced = shards ? store.flat_grads()
                                .slice(0, shards->dense.range.begin, shards->dense.range.end)
                                .to_vector<float>()
                          : store.flat_grads().to_vector<float>();
  return result;
}

// 0.5 · Σ over `ranks` and micro-batches of the contributions to element i, in double.
double reference(const std::vector<int>& ranks, int64_t i) {
  double sum = 0;
  for (const int r : ranks) {  // each rank accumulates its micro-batches in f32, as a backward
    float accumulated = 0;
    for (int m = 0; m < kMicroBatches; ++m) accumulated += contribution(r, m, i);
    sum += double(accumulated);
  }
  return 0.5 * sum;
}

std::vector<int> all_ranks(int d) {
  std::vector<int> ranks;
  for (int r = 0; r < d; ++r) ranks.push_back(r);
  return ranks;
}

TEST(GradBuckets, AllReduceSumsEveryElementAndOverlapIsBitIdentical) {
  ParallelState ps = ParallelState::create(test::world(), 1, 1);  // all ranks data-parallel
  const StepResult plain = run_step(ps, ps.dp_rank, false, false);
  const StepResult overlapped = run_step(ps, ps.dp_rank, true, false);
  const std::vector<int> ranks = all_ranks(ps.dp_size);
  ASSERT_EQ(plain.reduced.size(), 38u);
  for (size_t i = 0; i < plain.reduced.size(); ++i) {
    const double want = reference(ranks, int64_t(i));
    EXPECT_NEAR(plain.reduced[i], want, 1e-6 * std::abs(want) + 1e-6) << "element " << i;
  }
  EXPECT_EQ(plain.reduced, overlapped.reduced);
  const int launches = ps.dp_size > 1 ? 3 : 0;  // a group of one reduces nothing
  EXPECT_EQ(plain.posted_before_finish, 0);
  EXPECT_EQ(plain.posted, launches);
  // [4, 7) and [2, 4) are complete after the last micro-batch announced [3, 5) and [1, 3);
  // [0, 2) holds the never-announced parameter 0 and waits for finish().
  EXPECT_EQ(overlapped.posted_before_finish, ps.dp_size > 1 ? 2 : 0);
  EXPECT_EQ(overlapped.posted, launches);
}

TEST(GradBuckets, ReduceScatterFillsTheShardAndOverlapIsBitIdentical) {
  ParallelState ps = ParallelState::create(test::world(), 1, 1);
  const StepResult plain = run_step(ps, ps.dp_rank, false, true);
  const StepResult overlapped = run_step(ps, ps.dp_rank, true, true);
  const DpShard shard = DpShard::of(38, ps.dp_size, ps.dp_rank);
  const std::vector<int> ranks = all_ranks(ps.dp_size);
  ASSERT_EQ(int64_t(plain.reduced.size()), shard.range.end - shard.range.begin);
  for (int64_t i = shard.range.begin; i < shard.range.end; ++i) {
    const double want = reference(ranks, i);
    EXPECT_NEAR(plain.reduced[size_t(i - shard.range.begin)], want, 1e-6 * std::abs(want) + 1e-6)
        << "element " << i;
  }
  EXPECT_EQ(plain.reduced, overlapped.reduced);
  EXPECT_EQ(overlapped.posted_before_finish, ps.dp_size > 1 ? 2 : 0);
}

TEST(GradBuckets, SumsExpertGradientsOverTheExpertDataParallelRanks) {
  SKIP_UNLESS_WORLD_SIZE_DIVISIBLE_BY(2);
  // TP 1, EP 2: the dense parameters' replicas are every rank, the experts' the ranks of the
  // same EP rank (world rank mod 2).
  ParallelState ps = ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 1, 0, 2);
  const StepResult plain = run_step(ps, ps.rank, false, false);
  const StepResult overlapped = run_step(ps, ps.rank, true, false);
  std::vector<int> same_experts;
  for (int r = 0; r < ps.world_size; ++r)
    if (r % 2 == ps.ep_rank) same_experts.push_back(r);
  // The store lays the expert parameters out after the dense ones.
  EXPECT_EQ(plain.offsets, (std::vector<int64_t>{0, 5, 12, 25, 36, 15, 21}));
  for (size_t p = 0; p < kSizes.size(); ++p) {
    const std::vector<int> ranks = p == 3 || p == 4 ? same_experts : all_ranks(ps.world_size);
    for (int64_t i = plain.offsets[p]; i < plain.offsets[p] + kSizes[p]; ++i) {
      const double want = reference(ranks, i);
      EXPECT_NEAR(plain.reduced[size_t(i)], want, 1e-6 * std::abs(want) + 1e-6)
          << "parameter " << p << ", element " << i;
    }
  }
  EXPECT_EQ(plain.reduced, overlapped.reduced);
}

TEST(GradBuckets, ReduceScattersExpertGradientsIntoExpertDataParallelShards) {
  SKIP_UNLESS_WORLD_SIZE_DIVISIBLE_BY(2);
  // TP 1, EP 2 with the distributed optimizer: the 25 dense elements are cut over every rank
  // (dp × cp), the 13 expert ones (parameters 3 and 4, after the dense ones) over the ranks of
  // the same EP rank (edp, world / 2 of them); each rank's two shards hold the sums over their
  // groups, with and without overlap.
  ParallelState ps = ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 1, 0, 2);
  const StepResult plain = run_step(ps, ps.rank, false, true);
  const StepResult overlapped = run_step(ps, ps.rank, true, true);
  const int edp = ps.world_size / 2, edp_rank = ps.rank / 2;
  ASSERT_EQ(ps.edp->size(), edp);
  ASSERT_EQ(plain.shards.size(), 2u);
  const int64_t dense_k = (25 + ps.world_size - 1) / ps.world_size, expert_k = (13 + edp - 1) / edp;
  EXPECT_EQ(plain.shards[0].begin, std::min<int64_t>(25, ps.rank * dense_k));
  EXPECT_EQ(plain.shards[0].end, std::min<int64_t>(25, (ps.rank + 1) * dense_k));
  EXPECT_EQ(plain.shards[1].begin, 25 + std::min<int64_t>(13, edp_rank * expert_k));
  EXPECT_EQ(plain.shards[1].end, 25 + std::min<int64_t>(13, (edp_rank + 1) * expert_k));
  std::vector<int> same_experts;
  for (int r = 0; r < ps.world_size; ++r)
    if (r % 2 == ps.ep_rank) same_experts.push_back(r);
  for (size_t s = 0; s < 2; ++s)
    for (int64_t i = plain.shards[s].begin; i < plain.shards[s].end; ++i) {
      const double want = reference(s == 1 ? same_experts : all_ranks(ps.world_size), i);
      EXPECT_NEAR(plain.flat[size_t(i)], want, 1e-6 * std::abs(want) + 1e-6)
          << (s == 1 ? "expert" : "dense") << " element " << i;
      EXPECT_EQ(plain.flat[size_t(i)], overlapped.flat[size_t(i)]) << "element " << i;
    }
}

TEST(GradBuckets, SumsSequenceParallelGradientsOverTensorParallelRanks) {
  // TP = world, DP = 1: the odd parameters are sequence-parallel, each TP rank holding its
  // own partial gradient; after finish() they hold the sum over TP, the others are untouched.
  ParallelState ps = ParallelState::create(test::world(), test::world_size(), 1);
  const StepResult overlapped = run_step(ps, ps.tp_rank, true, false, true);
  int64_t offset = 0;
  for (size_t p = 0; p < kSizes.size(); ++p) {
    const std::vector<int> ranks = p % 2 == 1 ? all_ranks(ps.tp_size) : std::vector{ps.tp_rank};
    for (int64_t i = offset; i < offset + kSizes[p]; ++i) {
      const double want = reference(ranks, i);
      EXPECT_NEAR(overlapped.reduced[size_t(i)], want, 1e-6 * std::abs(want) + 1e-6)
          << "parameter " << p << ", element " << i;
    }
    offset += kSizes[p];
  }
}

TEST(GradBuckets, RefusesAnnouncementsOutsideAStepAndBeyondItsMicroBatches) {
  ParallelState ps = ParallelState::create(test::world(), 1, 1);
  ParameterStore store(0, 1);
  add_params(store);
  GradBuckets buckets(store, ps, kBucketElements, /*overlap=*/true);
  try {
    store.grads_accumulated(1, 3);
    ADD_FAILURE() << "an announcement before start() was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("outside a training step"));
  }
  buckets.start(1, 1.0);
  store.grads_accumulated(5, 7);  // complete: bucket [4, 7) still needs parameter 4
  try {
    store.grads_accumulated(6, 7);
    ADD_FAILURE() << "a second announcement of one micro-batch was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("'p6' was announced complete more often than the step"));
  }
  buckets.finish();
}

}  // namespace
}  // namespace megatron
