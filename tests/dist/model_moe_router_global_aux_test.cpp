// --moe-router-load-balancing-type global_aux_loss over data-parallel ranks (mpirun -np 2 / 4)
// against the PyTorch float64 reference of tools/reference/moe_router_reference.py (the global
// fixture: 2 data-parallel ranks x 2 micro-batches): each rank runs its micro-batches in order;
// the logged loss of each is the fixture's (the sum of the ranks' shares, every rank the same),
// each rank's input gradient is its share's, and the weight gradient reduced as the trainer does
// (summed over dp × cp, divided by dp) is the fixture's. The same with the layouts around the
// data-parallel pair that must not change it: TP 2 (the TP ranks route the same tokens) and EP 2
// (the router is dense: expert parallelism does not shrink the counts' group). The one-rank
// layout (DP 1, the two ranks' sequences in one micro-batch) is tests/unit/
// model_moe_router_test.cpp's: the same losses, a gradient dp times the DP 2 one, as Megatron's.
#include <gtest/gtest.h>

#include "../common/moe_router_golden.h"
#include "distributed/parallel_state.h"
#include "kernels/elementwise.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

using namespace megatron::testing;

void expect_matches_global_fixture(const ParallelState& ps, bool fp64) {
  ASSERT_EQ(ps.dp_size, 2);
  const auto g = load_moe_router_golden("global");
  const std::vector<double> losses = g->get("loss.global_load_balancing").to_vector<double>();
  const Tensor x = g->get("x");        // [ranks, micro, s, b, h]
  const Tensor dx = g->get("grad.x");  // [ranks, micro, s·b, h]
  const int64_t micro = x.size(1), b = x.size(3), h = x.size(4);
  MoeRouterHarness router(moe_router_golden_config("global", fp64), ps, g->get("w"), Tensor(),
                          Device::CPU);
  for (int64_t m = 0; m < micro; ++m) {
    SCOPED_TRACE(m);
    const Tensor mine = x.select(0, ps.dp_rank).select(0, m).clone();
    const MoeRouterHarness::Result r =
        router.run(mine.view({mine.size(0) * b, h}), b, Tensor(), 1.0f / float(micro));
    EXPECT_NEAR(r.losses.global_load_balancing, losses[size_t(m)], 1e-6 * losses[size_t(m)]);
    EXPECT_LE(max_relative_error(r.dx, dx.select(0, ps.dp_rank).select(0, m).clone()), 1e-5);
  }
  Tensor& grad = router.grad();
  ps.dp_cp->all_reduce(grad);
  kernels::scale(grad, 1.0f / float(ps.dp_size));
  EXPECT_LE(max_relative_error(grad, g->get("grad.w")), 1e-5);
}

TEST(MoeRouterGlobalAuxLossDist, DataParallelRanksMatchPytorch) {
  struct Layout {
    int tp, ep;
  };
  bool ran = false;
  for (const Layout l : {Layout{1, 1}, Layout{1, 2}, Layout{2, 1}}) {
    if (test::world_size() != 2 * l.tp) continue;
    ran = true;
    for (bool fp64 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "tp " << l.tp << " ep " << l.ep << " fp64 " << fp64);
      expect_matches_global_fixture(
          ParallelState::create(test::world(), l.tp, 1, RankOrder::kTpDpPp, 1, 0, l.ep), fp64);
    }
  }
  if (!ran) GTEST_SKIP() << "needs 2 or 4 ranks";
}

}  // namespace
}  // namespace megatron
