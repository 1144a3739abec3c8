// The MoE layer split over tensor-parallel ranks (mpirun -np 2 / 4), with and without sequence
// parallelism, on expert grids of their own (--expert-tensor-parallel-size other than TP),
// against the PyTorch fixtures of tools/reference/moe_reference.py: each rank's
// output (its sequence shard with sequence parallelism), router losses (those of the whole
// micro-batch), input gradient and gradient slices (experts split like the dense MLP, the
// router whole on every rank; the sinkhorn variants balance over the whole micro-batch, their
// shared expert's gate on each rank's rows).
#include <gtest/gtest.h>

#include "../common/moe_golden.h"
#include "distributed/parallel_state.h"
#include "mpi_test_util.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(MoePytorchGoldenDist, TensorParallelRanksMatchPytorch) {
  bool ran = false;
  for (int tp : {2, 4}) {
    if (test::world_size() % tp != 0) continue;
    ran = true;
    for (const char* name : {"softmax", "sigmoid", "capacity", "sinkhorn", "sinkhorn_top1"})
      for (bool sp : {false, true}) {
        if (sp && 6 % tp != 0) continue;  // the fixture's 6 positions split evenly
        SCOPED_TRACE(::testing::Message() << name << " tp=" << tp << " sp=" << sp);
        expect_matches_moe_golden(load_moe_golden(name),
                                  ParallelState::create(test::world(), tp, 1),
                                  [&](TransformerConfig& c) { c.sequence_parallel = sp; });
      }
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

// With context parallelism (CP 2, CP 2 × DP 2) each CP rank computes on its block of the
// sequence; its router losses are still the micro-batch's and its gradients sum over CP to the
// fixture's. Not the capacity fixture: Megatron's capacity is per CP rank (of its tokens), not
// the micro-batch's. The sigmoid one has the per-sequence loss, whose sequences span the CP
// ranks.
TEST(MoePytorchGoldenDist, ContextParallelRanksMatchPytorch) {
  if (test::world_size() % 2 != 0) GTEST_SKIP() << "needs a world size divisible by 2";
  const ParallelState ps =
      ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, /*context_parallel=*/2);
  for (const char* name : {"softmax", "sigmoid"}) {
    SCOPED_TRACE(name);
    expect_matches_moe_golden(load_moe_golden(name), ps, [](TransformerConfig&) {});
  }
}

// With --expert-tensor-parallel-size other than the TP size (docs/moe.md): each TP rank brings
// its block of the routed rows over tp_ep to the experts, split over etp (whole at ETP 1), and
// the layer's output, input gradient and router gradients are those of the fixture; the expert
// gradients, each rank's share of the rows, sum over edp to the fixture's. TP 2 ETP 1 with and
// without EP, ETP 2 over data-parallel ranks at TP 1, and (on 4 ranks) ETP 1 at TP 4, ETP 4 at
// TP 2, EP 2 with ETP 2 at TP 1.
TEST(MoePytorchGoldenDist, ExpertTensorParallelRanksMatchPytorch) {
  struct Grid {
    int tp, ep, etp;
  };
  bool ran = false;
  for (const Grid g :
       {Grid{2, 1, 1}, Grid{2, 2, 1}, Grid{1, 1, 2}, Grid{4, 2, 1}, Grid{2, 1, 4}, Grid{1, 2, 2}}) {
    if (test::world_size() % g.tp != 0 || test::world_size() % (g.ep * g.etp) != 0) continue;
    ran = true;
    const ParallelState ps =
        ParallelState::create(test::world(), g.tp, 1, RankOrder::kTpDpPp, 1, 0, g.ep, g.etp);
    for (const char* name : {"softmax", "sigmoid", "capacity", "sinkhorn"})
      for (bool sp : {false, true}) {
        if (sp && (g.tp == 1 || 6 % g.tp != 0)) continue;
        SCOPED_TRACE(::testing::Message() << name << " tp=" << g.tp << " ep=" << g.ep
                                          << " etp=" << g.etp << " sp=" << sp);
        expect_matches_moe_golden(load_moe_golden(name), ps,
                                  [&](TransformerConfig& c) { c.sequence_parallel = sp; });
      }
  }
  if (!ran) GTEST_SKIP() << "needs a world size divisible by 2";
}

}  // namespace
}  // namespace megatron
