// ParallelState against the Megatron rank grid enumerated independently: world ranks are
// laid out by nested loops (pp outermost, then dp, then cp, then tp; with
// --use-tp-pp-dp-mapping dp outermost, then pp, then cp, then tp), and every rank checks its
// coordinates and that each of its groups holds exactly the expected world ranks, in order.
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
  int tp, cp, dp, pp;
};

// grid[world_rank] = coordinates, by enumeration rather than by the div/mod formula.
std::vector<Coord> enumerate_grid(int t, int c, int d, int p, RankOrder order) {
  std::vector<Coord> grid;
  if (order == RankOrder::kTpDpPp) {
    for (int pp = 0; pp < p; ++pp)
      for (int dp = 0; dp < d; ++dp)
        for (int cp = 0; cp < c; ++cp)
          for (int tp = 0; tp < t; ++tp) grid.push_back({tp, cp, dp, pp});
  } else {
    for (int dp = 0; dp < d; ++dp)
      for (int pp = 0; pp < p; ++pp)
        for (int cp = 0; cp < c; ++cp)
          for (int tp = 0; tp < t; ++tp) grid.push_back({tp, cp, dp, pp});
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

void check_grid(int t, int c, int p, RankOrder order) {
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  const int d = n / (t * c * p);
  SCOPED_TRACE(::testing::Message()
               << "tp=" << t << " cp=" << c << " dp=" << d << " pp=" << p << " order "
               << (order == RankOrder::kTpDpPp ? "tp-dp-pp" : "tp-pp-dp"));
  ParallelState s = ParallelState::create(world, t, p, order, c);
  const std::vector<Coord> grid = enumerate_grid(t, c, d, p, order);
  const Coord m = grid[size_t(me)];

  EXPECT_EQ(s.world_size, n);
  EXPECT_EQ(s.rank, me);
  EXPECT_EQ(s.tp_size, t);
  EXPECT_EQ(s.cp_size, c);
  EXPECT_EQ(s.dp_size, d);
  EXPECT_EQ(s.pp_size, p);
  EXPECT_EQ(s.dp_cp_size, d * c);
  EXPECT_EQ(s.tp_rank, m.tp);
  EXPECT_EQ(s.cp_rank, m.cp);
  EXPECT_EQ(s.dp_rank, m.dp);
  EXPECT_EQ(s.pp_rank, m.pp);
  EXPECT_EQ(s.dp_cp_rank, m.dp * c + m.cp);
  EXPECT_EQ(s.world.get(), world.get());

  std::vector<int64_t> tp_expected, cp_expected, dp_expected, dp_cp_expected, pp_expected,
      mp_expected;
  for (int r = 0; r < n; ++r) {
    const Coord o = grid[size_t(r)];
    if (o.cp == m.cp && o.dp == m.dp && o.pp == m.pp) tp_expected.push_back(r);
    if (o.tp == m.tp && o.dp == m.dp && o.pp == m.pp) cp_expected.push_back(r);
    if (o.tp == m.tp && o.cp == m.cp && o.pp == m.pp) dp_expected.push_back(r);
    if (o.tp == m.tp && o.cp == m.cp && o.dp == m.dp) pp_expected.push_back(r);
    if (o.cp == m.cp && o.dp == m.dp) mp_expected.push_back(r);  // enumeration order (pp, tp)
  }
  // dp × cp ordered by (dp, cp), which the tp-pp-dp enumeration does not visit in that order.
  for (int dp = 0; dp < d; ++dp)
    for (int cp = 0; cp < c; ++cp)
      for (int r = 0; r < n; ++r) {
        const Coord o = grid[size_t(r)];
        if (o.tp == m.tp && o.pp == m.pp && o.dp == dp && o.cp == cp) dp_cp_expected.push_back(r);
      }
  // Gather all before asserting anything: the gathers are collectives.
  const auto tp_members = members_of(*s.tp, me);
  const auto cp_members = members_of(*s.cp, me);
  const auto dp_members = members_of(*s.dp, me);
  const auto dp_cp_members = members_of(*s.dp_cp, me);
  const auto pp_members = members_of(*s.pp, me);
  const auto mp_members = members_of(*s.mp, me);
  EXPECT_EQ(tp_members, tp_expected);
  EXPECT_EQ(cp_members, cp_expected);
  EXPECT_EQ(dp_members, dp_expected);
  EXPECT_EQ(dp_cp_members, dp_cp_expected);
  EXPECT_EQ(pp_members, pp_expected);
  EXPECT_EQ(mp_members, mp_expected);
  EXPECT_EQ(s.tp->rank(), m.tp);
  EXPECT_EQ(s.cp->rank(), m.cp);
  EXPECT_EQ(s.dp->rank(), m.dp);
  EXPECT_EQ(s.dp_cp->rank(), m.dp * c + m.cp);
  EXPECT_EQ(s.pp->rank(), m.pp);
  EXPECT_EQ(s.mp->rank(), m.pp * t + m.tp);
  // The embedding group: first and last stage of this rank's pipeline, only there.
  const bool end_stage = p > 1 && (m.pp == 0 || m.pp == p - 1);
  EXPECT_EQ(s.embedding != nullptr, end_stage);
  if (end_stage) {
    std::vector<int64_t> embedding_expected;
    for (int64_t r : pp_expected)
      if (grid[size_t(r)].pp == 0 || grid[size_t(r)].pp == p - 1) embedding_expected.push_back(r);
    EXPECT_EQ(members_of(*s.embedding, me), embedding_expected);
  }
  EXPECT_EQ(s.mp->size(), t * p);
}

// Every (t, c, p) whose product divides the world size, in both rank orders: at np 4 that is
// 1x1x1 (dp 4), 2x1x1 (dp 2), 4x1x1, 1x1x2 (dp 2), 2x1x2, 1x1x4, 1x2x1 (dp 2), 2x2x1, 1x2x2,
// 1x4x1 (t x c x p).
TEST(ParallelStateTest, EveryGridOfThisWorldSize) {
  const int n = test::world_size();
  int grids = 0;
  for (int t = 1; t <= n; ++t)
    for (int c = 1; t * c <= n; ++c)
      for (int p = 1; t * c * p <= n; ++p) {
        if (n % (t * c * p) != 0) continue;
        check_grid(t, c, p, RankOrder::kTpDpPp);
        check_grid(t, c, p, RankOrder::kTpPpDp);
        ++grids;
      }
  const int expected_grids[] = {0, 1, 4, 0, 10};
  if (n <= 4) {
    EXPECT_EQ(grids, expected_grids[n]);
  }
}

struct ExpertCoord {
  int etp, ep, edp, pp;
};

// The expert grid by enumeration: etp fastest, then ep, then edp and pp (pp outermost in
// Megatron's default order, edp outermost with --use-tp-pp-dp-mapping).
std::vector<ExpertCoord> enumerate_expert_grid(int et, int e, int ed, int p, RankOrder order) {
  std::vector<ExpertCoord> grid;
  const int outer = order == RankOrder::kTpDpPp ? p : ed,
            inner = order == RankOrder::kTpDpPp ? ed : p;
  for (int o = 0; o < outer; ++o)
    for (int i = 0; i < inner; ++i)
      for (int ep = 0; ep < e; ++ep)
        for (int etp = 0; etp < et; ++etp) {
          if (order == RankOrder::kTpDpPp) {
            grid.push_back({etp, ep, i, o});
          } else {
            grid.push_back({etp, ep, o, i});
          }
        }
  return grid;
}

void check_expert_grid(int t, int c, int p, int e, int et, RankOrder order) {
  auto world = test::world();
  const int n = world->size(), me = world->rank();
  const int ed = n / (et * e * p);
  SCOPED_TRACE(::testing::Message()
               << "tp=" << t << " cp=" << c << " pp=" << p << " ep=" << e << " etp=" << et
               << " order " << (order == RankOrder::kTpDpPp ? "tp-dp-pp" : "tp-pp-dp"));
  ParallelState s = ParallelState::create(world, t, p, order, c, /*cp_a2a_size=*/0, e, et);
  const std::vector<ExpertCoord> grid = enumerate_expert_grid(et, e, ed, p, order);
  const ExpertCoord m = grid[size_t(me)];
  EXPECT_EQ(s.ep_size, e);
  EXPECT_EQ(s.etp_size, et);
  EXPECT_EQ(s.edp_size, ed);
  EXPECT_EQ(s.ep_rank, m.ep);
  EXPECT_EQ(s.etp_rank, m.etp);
  EXPECT_EQ(s.edp_rank, m.edp);
  EXPECT_EQ(s.pp_rank, m.pp);  // both grids put this rank on the same pipeline stage

  std::vector<int64_t> ep_expected, etp_expected, edp_expected, tp_ep_expected, emp_expected;
  for (int r = 0; r < n; ++r) {
    const ExpertCoord o = grid[size_t(r)];
    if (o.etp == m.etp && o.edp == m.edp && o.pp == m.pp) ep_expected.push_back(r);
    if (o.ep == m.ep && o.edp == m.edp && o.pp == m.pp) etp_expected.push_back(r);
    if (o.etp == m.etp && o.ep == m.ep && o.pp == m.pp) edp_expected.push_back(r);
  }
  for (int pp = 0; pp < p; ++pp)  // ordered by (pp, ep, etp)
    for (int ep = 0; ep < e; ++ep)
      for (int etp = 0; etp < et; ++etp)
        for (int r = 0; r < n; ++r) {
          const ExpertCoord o = grid[size_t(r)];
          if (o.edp == m.edp && o.pp == pp && o.ep == ep && o.etp == etp) emp_expected.push_back(r);
        }
  for (int ep = 0; ep < e; ++ep)  // ordered by (ep, etp)
    for (int etp = 0; etp < et; ++etp)
      for (int r = 0; r < n; ++r) {
        const ExpertCoord o = grid[size_t(r)];
        if (o.edp == m.edp && o.pp == m.pp && o.ep == ep && o.etp == etp)
          tp_ep_expected.push_back(r);
      }
  const auto ep_members = members_of(*s.ep, me);
  const auto etp_members = members_of(*s.etp, me);
  const auto edp_members = members_of(*s.edp, me);
  const auto tp_ep_members = members_of(*s.tp_ep, me);
  const auto emp_members = members_of(*s.emp, me);
  EXPECT_EQ(emp_members, emp_expected);
  EXPECT_EQ(ep_members, ep_expected);
  EXPECT_EQ(etp_members, etp_expected);
  EXPECT_EQ(edp_members, edp_expected);
  EXPECT_EQ(tp_ep_members, tp_ep_expected);
  EXPECT_EQ(s.ep->rank(), m.ep);
  EXPECT_EQ(s.etp->rank(), m.etp);
  EXPECT_EQ(s.edp->rank(), m.edp);
  EXPECT_EQ(s.tp_ep->rank(), m.ep * et + m.etp);
}

// Every dense grid (t, c, p) with every expert grid (e, et) on it that Megatron accepts: et·e·p
// divides the world size, and with --use-tp-pp-dp-mapping et·e = t·c.
TEST(ParallelStateTest, EveryExpertGridOfThisWorldSize) {
  const int n = test::world_size();
  int grids = 0;
  for (int t = 1; t <= n; ++t)
    for (int c = 1; t * c <= n; ++c)
      for (int p = 1; t * c * p <= n; ++p) {
        if (n % (t * c * p) != 0) continue;
        for (int e = 1; e * p <= n; ++e)
          for (int et = 1; et * e * p <= n; ++et) {
            if (n % (et * e * p) != 0) continue;
            check_expert_grid(t, c, p, e, et, RankOrder::kTpDpPp);
            ++grids;
            if (et * e == t * c) check_expert_grid(t, c, p, e, et, RankOrder::kTpPpDp);
          }
      }
  EXPECT_GT(grids, 0);
}

TEST(ParallelStateTest, ExpertGroupsDefaultToTheDenseTensorParallelSize) {
  SKIP_UNLESS_WORLD_SIZE(4);
  // TP 2, EP 2: etp follows TP; ep takes the dense grid's data-parallel ranks.
  ParallelState s = ParallelState::create(test::world(), 2, 1, RankOrder::kTpDpPp, 1, 0, 2);
  EXPECT_EQ(s.etp_size, 2);
  EXPECT_EQ(s.edp_size, 1);
  EXPECT_EQ(s.etp_rank, s.tp_rank);
  EXPECT_EQ(s.ep_rank, s.dp_rank);
}

TEST(ParallelStateTest, ExpertSizesThatDoNotFitNameTheFlags) {
  const int n = test::world_size();
  try {
    ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 1, 0, 2 * n);
    ADD_FAILURE() << "accepted expert parallel size " << 2 * n;
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--expert-model-parallel-size " + std::to_string(2 * n)));
    EXPECT_THAT(e.message(), HasSubstr("world size " + std::to_string(n)));
  }
  try {
    ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 1, 0, 0);
    ADD_FAILURE() << "accepted expert parallel size 0";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--expert-model-parallel-size must be >= 1"));
  }
  EXPECT_THROW(ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 1, 0, 1, -1), Error);
  if (n >= 2) {
    try {
      ParallelState::create(test::world(), 1, 1, RankOrder::kTpPpDp, 1, 0, 2);
      ADD_FAILURE() << "accepted tp-pp-dp with ep 2 over tp 1";
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr("--use-tp-pp-dp-mapping needs"));
    }
  }
}

TEST(ParallelStateTest, ExpertCountsMustSplitEvenly) {
  EXPECT_NO_THROW(check_expert_count(8, 4));
  EXPECT_NO_THROW(check_expert_count(0, 1));
  try {
    check_expert_count(6, 4);
    ADD_FAILURE() << "accepted 6 experts over 4 ranks";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--num-experts 6 is not divisible by "
                                       "--expert-model-parallel-size 4"));
  }
  try {
    check_expert_count(0, 2);
    ADD_FAILURE() << "accepted expert parallelism without experts";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("give --num-experts"));
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
  try {
    ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 2 * n);
    ADD_FAILURE() << "accepted context parallel size " << 2 * n;
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--context-parallel-size " + std::to_string(2 * n)));
  }
  EXPECT_THROW(ParallelState::create(nullptr, 1, 1), Error);
}

}  // namespace
}  // namespace megatron
