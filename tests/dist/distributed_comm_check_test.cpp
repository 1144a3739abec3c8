// The `megatron comm-check` verifications over real MPI communicators: the world, groups
// made by split, and the rank grids of every parallel layout this world size allows.
#include <gtest/gtest.h>

#include "distributed/comm_check.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

TEST(CommCheckDistTest, WorldPassesEveryCollective) {
  EXPECT_NO_THROW(verify_collectives(*test::world()));
}

TEST(CommCheckDistTest, EveryGridPassesOnItsGroups) {
  const int n = test::world_size();
  for (int t = 1; t <= n; ++t) {
    for (int p = 1; t * p <= n; ++p) {
      if (n % (t * p) != 0) continue;
      SCOPED_TRACE(::testing::Message() << "tp=" << t << " pp=" << p);
      ParallelState s = ParallelState::create(test::world(), t, p);
      EXPECT_NO_THROW(verify_groups(s));
      // Sub-communicators carry every operation too (tp and dp groups are what training uses).
      EXPECT_NO_THROW(verify_collectives(*s.tp));
      EXPECT_NO_THROW(verify_collectives(*s.dp));
    }
  }
}

}  // namespace
}  // namespace megatron
