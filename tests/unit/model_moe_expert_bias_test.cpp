// Aux-loss-free load balancing (--moe-router-enable-expert-bias, model/moe_router.h) against
// the PyTorch trajectory of tools/reference/moe_reference.py expert_bias (tests/data/moe/
// expert_bias): over five steps of two routers, each micro-batch's choice with the bias
// (kernels::moe_topk_forward), the step's token counts (kernels::moe_expert_counts, summed over
// the micro-batches of both data-parallel ranks) and the biases after update_moe_expert_biases,
// bit for bit (float32 as Megatron's buffers). Then the kernel alone on ties and zero counts.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "../common/source_dir.h"
#include "core/safetensors.h"
#include "distributed/solo_communicator.h"
#include "kernel_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/moe_permute.h"
#include "kernels/moe_router.h"
#include "model/moe_router.h"
#include "parallel/parameter.h"

namespace megatron {
namespace {

using test::to_double;

std::string router_name(int64_t r) {
  return "layers." + std::to_string(r) + ".mlp.router";
}

TEST(MoeExpertBias, TrajectoryMatchesPytorch) {
  SafetensorsReader golden(testing::source_dir() +
                           "/tests/data/moe/expert_bias/golden.safetensors");
  const Tensor logits = golden.get("logits");    // [steps, ranks, micro, routers, n, e]
  const Tensor indices = golden.get("indices");  // [steps, ranks, micro, routers, n, k]
  const Tensor counts = golden.get("counts");    // [steps, routers, e]
  const Tensor bias = golden.get("bias");        // [steps + 1, routers, e]
  const float rate = golden.get("rate").to_vector<float>()[0];
  const int64_t steps = logits.size(0), ranks = logits.size(1), micro = logits.size(2),
                routers = logits.size(3), n = logits.size(4), e = logits.size(5),
                k = indices.size(5);

  ParameterStore store(0, 1);
  for (int64_t r = 0; r < routers; ++r) {
    store.add_buffer({router_name(r) + ".expert_bias", {e}, true});
    store.add_buffer({router_name(r) + ".local_tokens_per_expert", {e}, false});
  }
  auto buffer = [&](int64_t r, const char* what) -> Tensor& {
    return store.buffers()[size_t(2 * r + (std::string(what) == "bias" ? 0 : 1))].value;
  };
  SoloCommunicator dp;
  const kernels::MoeTopkParams p{.topk = k, .sigmoid = true};
  for (int64_t s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    for (int64_t r = 0; r < routers; ++r)
      EXPECT_EQ(to_double(buffer(r, "bias")),
                to_double(bias.slice(0, s, s + 1).view({routers, e}).slice(0, r, r + 1).view({e})));
    for (int64_t rank = 0; rank < ranks; ++rank)
      for (int64_t m = 0; m < micro; ++m)
        for (int64_t r = 0; r < routers; ++r) {
          const int64_t at = ((s * ranks + rank) * micro + m) * routers + r;
          const Tensor l = logits.view({-1, n, e}).slice(0, at, at + 1).view({n, e}).clone();
          Tensor idx = Tensor::empty({n, k}, DType::I32), probs = Tensor::empty({n, k}, DType::F32);
          kernels::moe_topk_forward(l, buffer(r, "bias"), p, idx, probs);
          ASSERT_EQ(to_double(idx), to_double(indices.view({-1, n, k}).slice(0, at, at + 1)))
              << "rank " << rank << " micro-batch " << m << " router " << r;
          Tensor c = Tensor::empty({e}, DType::I64);
          kernels::moe_expert_counts(idx, e, c);
          const std::vector<int64_t> host = c.to_vector<int64_t>();
          const std::vector<float> as_float(host.begin(), host.end());
          kernels::axpy(1.0f, Tensor::from_vector(as_float, {e}), buffer(r, "counts"));
        }
    for (int64_t r = 0; r < routers; ++r)
      EXPECT_EQ(to_double(buffer(r, "counts")),
                to_double(counts.slice(0, s, s + 1).view({routers, e}).slice(0, r, r + 1)));
    update_moe_expert_biases(store, dp, rate);
    for (int64_t r = 0; r < routers; ++r)
      EXPECT_EQ(to_double(buffer(r, "counts")), std::vector<double>(size_t(e), 0.0));
  }
  for (int64_t r = 0; r < routers; ++r)
    EXPECT_EQ(to_double(buffer(r, "bias")),
              to_double(bias.slice(0, steps, steps + 1).view({routers, e}).slice(0, r, r + 1)));
}

// An expert at the mean keeps its bias; a router with no token (every count 0) changes nothing.
TEST(MoeExpertBias, KernelLeavesExpertsAtTheMeanAlone) {
  const Tensor tokens = Tensor::from_vector(std::vector<float>{3, 1, 2, 2, 0, 0, 0, 0}, {2, 4});
  Tensor bias =
      Tensor::from_vector(std::vector<float>{0.5f, -0.25f, 0.0f, 1.0f, 1, 2, 3, 4}, {2, 4});
  kernels::moe_expert_bias_update(tokens, 0.125f, bias);
  EXPECT_EQ(to_double(bias), (std::vector<double>{0.375, -0.125, 0.0, 1.0, 1, 2, 3, 4}));
}

}  // namespace
}  // namespace megatron
