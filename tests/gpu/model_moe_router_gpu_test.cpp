// The MoE router alone on a GPU (tests/unit/model_moe_router_test.cpp's checks with the
// parameters and activations on cuda:0): --moe-router-dtype fp64 — cuBLASLt's f64 GEMM and the
// router kernels on f64 logits — reproduces the PyTorch float64 goldens, routes the tie
// fixture's token as float64 where fp32 takes the other expert, and global_aux_loss's running
// mean over two micro-batches matches the reference. Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include "../common/moe_router_golden.h"
#include "core/device_runtime.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using namespace megatron::testing;

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

TEST(MoeRouterGpu, Fp64MatchesPytorchFloat64) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  for (const char* name : {"softmax", "sigmoid", "tie"}) {
    SCOPED_TRACE(name);
    const auto g = load_moe_router_golden(name);
    expect_matches_moe_router_golden(*g, run_moe_router_golden(*g, name, true, solo(), gpu));
  }
  const auto g = load_moe_router_golden("tie");
  const std::vector<int32_t> fp32 =
      run_moe_router_golden(*g, "tie", false, solo(), gpu).result.indices.to_vector<int32_t>();
  EXPECT_EQ(fp32[1], 1);  // the rounded tie goes to the lower index, float64's to expert 2
  EXPECT_EQ(g->get("indices").to_vector<int32_t>()[1], 2);
}

// The CPU and the GPU give the same experts and, within rounding, the same weights, losses and
// gradients, in both router dtypes.
TEST(MoeRouterGpu, MatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  for (const char* name : {"softmax", "sigmoid", "tie"})
    for (bool fp64 : {false, true}) {
      SCOPED_TRACE(::testing::Message() << name << (fp64 ? " fp64" : " fp32"));
      const auto g = load_moe_router_golden(name);
      const MoeRouterRun cpu = run_moe_router_golden(*g, name, fp64, solo(), Device::CPU);
      const MoeRouterRun dev = run_moe_router_golden(*g, name, fp64, solo(), gpu);
      EXPECT_EQ(dev.result.indices.to_vector<int32_t>(), cpu.result.indices.to_vector<int32_t>());
      EXPECT_LE(max_relative_error(dev.result.probs, cpu.result.probs), 1e-6);
      EXPECT_LE(max_relative_error(dev.grad_w, cpu.grad_w), 1e-6);
      EXPECT_LE(max_relative_error(dev.result.dx, cpu.result.dx), 1e-6);
      // The losses are sums in double over the logits: f64 logits agree to f64 rounding, f32
      // ones (OpenBLAS and cuBLASLt sum in different orders) to f32 rounding.
      const double rtol = fp64 ? 1e-9 : 1e-6;
      const MoeLosses &a = dev.result.losses, &b = cpu.result.losses;
      EXPECT_NEAR(a.load_balancing, b.load_balancing, rtol * b.load_balancing);
      EXPECT_NEAR(a.seq_load_balancing, b.seq_load_balancing, rtol * b.seq_load_balancing);
      EXPECT_NEAR(a.z_loss, b.z_loss, rtol * b.z_loss);
    }
}

TEST(MoeRouterGpu, GlobalAuxLossMatchesPytorch) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  const auto g = load_moe_router_golden("global");
  const std::vector<double> losses = g->get("loss.global_load_balancing").to_vector<double>();
  const int64_t b = g->get("x").size(3);
  MoeRouterHarness router(moe_router_golden_config("global", true), solo(), g->get("w"), Tensor(),
                          gpu);
  for (int64_t m = 0; m < 2; ++m) {
    const MoeRouterHarness::Result res =
        router.run(global_micro_batch_at_one_rank(*g, m), 2 * b, Tensor(), 0.5f);
    EXPECT_NEAR(res.losses.global_load_balancing, losses[size_t(m)], 1e-6 * losses[size_t(m)]);
  }
  EXPECT_LE(max_relative_error(router.grad().to(Device::CPU), g->get("grad.w_dp1")), 1e-5);
}

}  // namespace
}  // namespace megatron
