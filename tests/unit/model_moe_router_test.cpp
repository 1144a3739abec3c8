// The MoE router alone (model/moe_router.h) against the PyTorch float64 goldens of
// tools/reference/moe_router_reference.py (tests/common/moe_router_golden.h):
// --moe-router-dtype fp64 with softmax (groups, aux/seq-aux/z losses) and sigmoid (expert bias,
// groups, scaling) scoring reproduces the float64 choices, weights, losses and gradients; on
// the tie fixture fp32 routes a token to another expert than float64 and fp64 does not; and
// global_aux_loss at one data-parallel rank reproduces the running-mean loss and gradient of
// two micro-batches (the reference's two ranks' sequences in each), then restarts with a step.
#include <gtest/gtest.h>

#include "../common/moe_router_golden.h"
#include "model_test_util.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(MoeRouterFp64, MatchesPytorchFloat64) {
  for (const char* name : {"softmax", "sigmoid", "tie"}) {
    SCOPED_TRACE(name);
    const auto g = load_moe_router_golden(name);
    expect_matches_moe_router_golden(
        *g,
        run_moe_router_golden(*g, name, /*fp64=*/true, test::solo_parallel_state(), Device::CPU));
  }
}

// Token 0's logits 1 and 1 + 2^-30 (experts 1 and 2): the f32 GEMM rounds them to a tie, which
// the lower index wins; float64 (and fp64) take expert 2.
TEST(MoeRouterFp64, Fp32RoutesTheRoundedTieElsewhere) {
  const auto g = load_moe_router_golden("tie");
  const std::vector<int32_t> golden = g->get("indices").to_vector<int32_t>();
  ASSERT_EQ(golden[0], 0);
  ASSERT_EQ(golden[1], 2);
  const ParallelState ps = test::solo_parallel_state();
  const std::vector<int32_t> fp32 =
      run_moe_router_golden(*g, "tie", false, ps, Device::CPU).result.indices.to_vector<int32_t>();
  const std::vector<int32_t> fp64 =
      run_moe_router_golden(*g, "tie", true, ps, Device::CPU).result.indices.to_vector<int32_t>();
  EXPECT_EQ(fp32[0], 0);
  EXPECT_EQ(fp32[1], 1);
  EXPECT_EQ(fp64, golden);
  // The other tokens have no near-tie: both dtypes route them alike.
  EXPECT_TRUE(std::equal(fp32.begin() + 2, fp32.end(), golden.begin() + 2));
}

// Away from ties fp32 routes as float64, within f32's rounding of the logits.
TEST(MoeRouterFp64, Fp32MatchesFloat64AwayFromTies) {
  for (const char* name : {"softmax", "sigmoid"}) {
    SCOPED_TRACE(name);
    const auto g = load_moe_router_golden(name);
    const MoeRouterRun run =
        run_moe_router_golden(*g, name, false, test::solo_parallel_state(), Device::CPU);
    EXPECT_EQ(run.result.indices.to_vector<int32_t>(), g->get("indices").to_vector<int32_t>());
    EXPECT_LE(max_relative_error(run.result.probs, g->get("probs")), 1e-5);
    EXPECT_LE(max_relative_error(run.grad_w, g->get("grad.w")), 1e-5);
  }
}

TEST(MoeRouterGlobalAuxLoss, OneRankMatchesPytorch) {
  const auto g = load_moe_router_golden("global");
  const std::vector<double> losses = g->get("loss.global_load_balancing").to_vector<double>();
  for (bool fp64 : {false, true}) {
    SCOPED_TRACE(fp64 ? "fp64" : "fp32");
    const TransformerConfig c = moe_router_golden_config("global", fp64);
    MoeRouterHarness h(c, test::solo_parallel_state(), g->get("w"), Tensor(), Device::CPU);
    const int64_t b = g->get("x").size(3);
    for (int64_t m = 0; m < 2; ++m) {
      const MoeRouterHarness::Result r =
          h.run(global_micro_batch_at_one_rank(*g, m), 2 * b, Tensor(), 0.5f);
      EXPECT_NEAR(r.losses.global_load_balancing, losses[size_t(m)], 1e-6 * losses[size_t(m)]);
      EXPECT_EQ(r.losses.load_balancing, 0.0);
    }
    EXPECT_LE(max_relative_error(h.grad().to(Device::CPU), g->get("grad.w_dp1")), 1e-5);
  }
}

// A new step restarts the running mean (reset_moe_token_counts).
TEST(MoeRouterGlobalAuxLoss, StepResetRestartsTheRunningMean) {
  const auto g = load_moe_router_golden("global");
  const std::vector<double> losses = g->get("loss.global_load_balancing").to_vector<double>();
  const TransformerConfig c = moe_router_golden_config("global", false);
  const int64_t b = g->get("x").size(3);
  MoeRouterHarness h(c, test::solo_parallel_state(), g->get("w"), Tensor(), Device::CPU);
  const double first = h.run(global_micro_batch_at_one_rank(*g, 0), 2 * b, Tensor(), 1.0f)
                           .losses.global_load_balancing;
  EXPECT_NEAR(first, losses[0], 1e-6 * losses[0]);
  const double second = h.run(global_micro_batch_at_one_rank(*g, 0), 2 * b, Tensor(), 1.0f)
                            .losses.global_load_balancing;
  EXPECT_NEAR(second, first, 1e-12 * first);  // the same counts again: the same mean
  h.reset_step();
  EXPECT_NEAR(h.run(global_micro_batch_at_one_rank(*g, 0), 2 * b, Tensor(), 1.0f)
                  .losses.global_load_balancing,
              losses[0], 1e-6 * losses[0]);
}

TEST(MoeRouterGlobalAuxLoss, RecomputedMoeLayersAreRefused) {
  TransformerConfig c = moe_router_golden_config("global", false);
  c.recompute_moe = true;
  const Tensor w = Tensor::zeros({6, 9}, DType::F32);
  EXPECT_THROW(MoeRouterHarness(c, test::solo_parallel_state(), w, Tensor(), Device::CPU), Error);
}

}  // namespace
}  // namespace megatron
