// The MoE layer at TP = 1 against the PyTorch fixtures of tools/reference/moe_reference.py
// (tests/common/moe_golden.h): output, router losses, tokens per expert, input gradient and
// every weight gradient, for the softmax / sigmoid-grouped-shared / capacity / sinkhorn (with a
// gated shared expert) variants, and the sinkhorn variants' evaluation output.
#include <gtest/gtest.h>

#include "../common/moe_golden.h"
#include "model_test_util.h"

namespace megatron {
namespace {

using namespace megatron::testing;

TEST(MoePytorchGolden, LayerMatchesPytorch) {
  for (const char* name : {"softmax", "sigmoid", "capacity", "sinkhorn", "sinkhorn_top1"}) {
    SCOPED_TRACE(name);
    expect_matches_moe_golden(load_moe_golden(name), test::solo_parallel_state(),
                              [](TransformerConfig&) {});
  }
}

TEST(MoePytorchGolden, DroplessVariantsRouteEveryPair) {
  // Without a capacity every (token, choice) pair has a slot: Σ tokens per expert = N·k.
  const MoeGolden g = load_moe_golden("softmax");
  int64_t total = 0;
  for (int64_t t : g.file->get("tokens_per_expert").to_vector<int64_t>()) total += t;
  EXPECT_EQ(total, 6 * 3 * 2);
}

}  // namespace
}  // namespace megatron
