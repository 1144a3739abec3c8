// Megatron-Core's Nemotron-style model variants against PyTorch at TP = 1 (the fixture of
// tools/reference/gpt_variants_reference.py: --apply-layernorm-1p, --squared-relu,
// --qk-layernorm, --rotary-interleaved with --rotary-percent 0.5, GQA, biases): logits, loss and
// every gradient, with the unfused and the fused (flash) attention core and with full and
// selective recompute; and the zero-centred gains start at 0.
#include <gtest/gtest.h>

#include "../common/gpt_variants_golden.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using namespace megatron::testing;

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

TEST(GptVariantsPytorchGolden, MatchesPytorch) {
  const GptVariantsGolden g = load_gpt_variants_golden();
  expect_matches_gpt_variants_golden(g, solo(), [](GptConfig&) {});
}

TEST(GptVariantsPytorchGolden, FlashAttentionAndRecomputeMatchPytorch) {
  const GptVariantsGolden g = load_gpt_variants_golden();
  expect_matches_gpt_variants_golden(g, solo(), [](GptConfig& c) { c.flash_attention = true; });
  expect_matches_gpt_variants_golden(g, solo(),
                                     [](GptConfig& c) { c.recompute_activations = true; });
  expect_matches_gpt_variants_golden(g, solo(), [](GptConfig& c) { c.selective_recompute = true; });
}

// Each variant is seen by the fixture: switching one off moves the loss by over 10 times the
// golden comparison's tolerance (1e-5 relative).
TEST(GptVariantsPytorchGolden, EveryVariantChangesTheLoss) {
  const GptVariantsGolden g = load_gpt_variants_golden();
  const double expected = g.file->get("loss").data<double>()[0];
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE(variant);
    GptConfig c = g.config;
    if (variant == 0) c.arch.apply_layernorm_1p = false;
    if (variant == 1) c.arch.squared_relu = false;
    if (variant == 2) c.arch.rotary_interleaved = false;
    if (variant == 3) c.arch.qk_layernorm = false;
    ParallelState ps = solo();
    ParameterStore store(0, 1, Device::CPU);
    GptModel model(c, ps, store);
    store.allocate();
    TensorMap weights = g.weights;
    if (variant == 3)
      std::erase_if(weights, [](const auto& kv) {
        return kv.first.find("_layernorm.") != std::string::npos &&
               kv.first.find("self_attention") != std::string::npos;
      });
    assign_from_full_tensors(weights, store);
    model.refresh_compute_weights();
    EXPECT_GT(std::abs(model.forward_backward(g.batch, 1.0f, 1) - expected), 1e-4 * expected);
  }
}

TEST(GptVariantsPytorchGolden, ZeroCentredGainsStartAtZero) {
  GptConfig c = gpt_variants_config();
  ParallelState ps = solo();
  ParameterStore store(0, 1, Device::CPU);
  GptModel model(c, ps, store);
  store.allocate();
  model.init_weights(5);
  int norms = 0;
  for (const Parameter& p : store.params())
    if (p.spec.name.find("layernorm.weight") != std::string::npos) {
      ++norms;
      for (float v : p.value.to_vector<float>()) ASSERT_EQ(v, 0.0f) << p.spec.name;
    }
  EXPECT_EQ(norms, 2 * 4 + 1);  // per layer: input, post-attention, q, k; the final one
}

}  // namespace
}  // namespace megatron
