// ParallelState against the Megatron rank grid enumerated independently: world ranks are
// laid out by nested loops (pp outermost, then dp, then tp; with --use-tp-pp-dp-mapping dp
// outermost, then pp, then tp), and every rank checks its coordinates and that each of its
// groups holds exactly the expected world ranks, in order.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "distributed/parallel_state.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

struct Coord {
  int tp, dp, pp;
};

// grid[world_rank] = coordinates, by enumeration rather than by the div/mod formula.
std::vector<Coord> enumerate_grid(int t, int d, int p, RankOrder order) {
  std::vector<Coord> grid;
  if (order == RankOrder::kTpDpPp) {
    for (int pp = 0; pp < p; ++pp)
      for (int dp = 0; dp < d; ++dp)
        for (int tp = 0; tp < t; ++tp) grid.push_back({tp, dp, pp});
  } else {
    for (int dp = 0; dp < d; ++dp)
      for (int pp = 0; pp < p; ++pp)
        for (int tp = 0; tp < t; ++tp) grid.push_back({tp, dp, pp});
  }
  return grid;
}

// World ranks of a group, gathered through the group itself (so this checks membership and
// order as the communicator sees them).
std::vector<int64_t> members_of(Communicator& group, int world_rank) {
  Tensor mine = Tensor::from_vector<int64_t>({world_rank}, {1});
  Tensor all = Tensor::empty({group.size()}, DType::I64);
  group.all_gather(mine, all);
  return all.to_vector<int64_t>();
}

void check_grid(int t, int p, RankOrder order) {
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  const int d = n / (t * p);
  SCOPED_TRACE(::testing::Message() << "tp=" << t << " dp=" << d << " pp=" << p << " order "
                                    << (order == RankOrder::kTpDpPp ? "tp-dp-pp" : "tp-pp-dp"));
  ParallelState s = ParallelState::create(world, t, p, order);
  const std::vector<Coord> grid = enumerate_grid(t, d, p, order);
  const Coord c = grid[size_t(me)];

  EXPECT_EQ(s.world_size, n);
  EXPECT_EQ(s.rank, me);
  EXPECT_EQ(s.tp_size, t);
  EXPECT_EQ(s.dp_size, d);
  EXPECT_EQ(s.pp_size, p);
  EXPECT_EQ(s.tp_rank, c.tp);
  EXPECT_EQ(s.dp_rank, c.dp);
  EXPECT_EQ(s.pp_rank, c.pp);
  EXPECT_EQ(s.world.get(), world.get());

  std::vector<int64_t> tp_expected, dp_expected, pp_expected, mp_expected;
  for (int r = 0; r < n; ++r) {
    const Coord o = grid[size_t(r)];
    if (o.dp == c.dp && o.pp == c.pp) tp_expected.push_back(r);
    if (o.tp == c.tp && o.pp == c.pp) dp_expected.push_back(r);
    if (o.tp == c.tp && o.dp == c.dp) pp_expected.push_back(r);
    if (o.dp == c.dp) mp_expected.push_back(r);  // enumeration order is (pp, tp)
  }
  // Gather all four before asserting anything: the gathers are collectives.
  const auto tp_members = members_of(*s.tp, me);
  const auto dp_members = members_of(*s.dp, me);
  const auto pp_members = members_of(*s.pp, me);
  const auto mp_members = members_of(*s.mp, me);
  EXPECT_EQ(tp_members, tp_expected);
  EXPECT_EQ(dp_members, dp_expected);
  EXPECT_EQ(pp_members, pp_expected);
  EXPECT_EQ(mp_members, mp_expected);
  EXPECT_EQ(s.tp->rank(), c.tp);
  EXPECT_EQ(s.dp->rank(), c.dp);
  EXPECT_EQ(s.pp->rank(), c.pp);
  EXPECT_EQ(s.mp->rank(), c.pp * t + c.tp);
  // The embedding group: first and last stage of this rank's pipeline, only there.
  const bool end_stage = p > 1 && (c.pp == 0 || c.pp == p - 1);
  EXPECT_EQ(s.embedding != nullptr, end_stage);
  if (end_stage) {
    std::vector<int64_t> embedding_expected;
    for (int64_t r : pp_expected)
      if (grid[size_t(r)].pp == 0 || grid[size_t(r)].pp == p - 1) embedding_expected.push_back(r);
    EXPECT_EQ(members_of(*s.embedding, me), embedding_expected);
  }
  EXPECT_EQ(s.mp->size(), t * p);
}

// Every (t, p) whose product divides the world size, in both rank orders: at np 4 that is 1x1
// (dp 4), 2x1 (dp 2), 4x1, 1x2 (dp 2), 2x2 (dp 1), 1x4.
TEST(ParallelStateTest, EveryGridOfThisWorldSize) {
  const int n = test::world_size();
  int grids = 0;
  for (int t = 1; t <= n; ++t) {
    for (int p = 1; t * p <= n; ++p) {
      if (n % (t * p) != 0) continue;
      check_grid(t, p, RankOrder::kTpDpPp);
      check_grid(t, p, RankOrder::kTpPpDp);
      ++grids;
    }
  }
  const int expected_grids[] = {0, 1, 3, 0, 6};
  if (n <= 4) {
    EXPECT_EQ(grids, expected_grids[n]);
  }
}

TEST(ParallelStateTest, TwoByTwoHasTheMegatronLayout) {
  SKIP_UNLESS_WORLD_SIZE(4);
  ParallelState s = ParallelState::create(test::world(), 2, 1);
  // Ranks {0,1} and {2,3} share a model replica; {0,2} and {1,3} share a tensor shard.
  const int tp_rank[] = {0, 1, 0, 1}, dp_rank[] = {0, 0, 1, 1};
  EXPECT_EQ(s.tp_rank, tp_rank[s.rank]);
  EXPECT_EQ(s.dp_rank, dp_rank[s.rank]);
  EXPECT_EQ(s.dp_size, 2);
  EXPECT_EQ(s.pp_rank, 0);
}

TEST(ParallelStateTest, SizesThatDoNotDivideTheWorldNameTheFlags) {
  const int n = test::world_size();
  try {
    ParallelState::create(test::world(), n + 1, 1);
    ADD_FAILURE() << "accepted tensor parallel size " << n + 1;
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--tensor-model-parallel-size"));
    EXPECT_THAT(e.message(), HasSubstr("world size " + std::to_string(n)));
  }
  try {
    ParallelState::create(test::world(), 1, 3 * n);
    ADD_FAILURE() << "accepted pipeline parallel size " << 3 * n;
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--pipeline-model-parallel-size"));
  }
  try {
    ParallelState::create(test::world(), 0, 1);
    ADD_FAILURE() << "accepted tensor parallel size 0";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--tensor-model-parallel-size must be >= 1"));
  }
  EXPECT_THROW(ParallelState::create(test::world(), 1, -2), Error);
  EXPECT_THROW(ParallelState::create(nullptr, 1, 1), Error);
}

}  // namespace
}  // namespace megatron
