// The MoE layer split over tensor-parallel ranks (mpirun -np 2 / 4), with and without sequence
// parallelism, against the PyTorch fixtures of tools/reference/moe_reference.py: each rank's
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

}  // namespace
}  // namespace megatron
