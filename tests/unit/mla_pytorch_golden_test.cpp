// Multi-latent attention against PyTorch at TP = 1 (the fixtures of
// tools/reference/mla_reference.py, tests/common/mla_golden.h): logits, loss and every gradient,
// with the unfused and the fused (flash) attention core, full and selective recompute, and in
// bf16 (looser, bf16's rounding); YaRN at factor 40 (mla_yarn: its frequencies, cos/sin factor
// and softmax temperature); the RoPE part is seen by the fixture; the planner counts MLA's
// parameters and tensors as the model registers them; bad MLA shapes are refused by name.
#include <gtest/gtest.h>

#include "../common/mla_golden.h"
#include "core/error.h"
#include "distributed/solo_communicator.h"
#include "plan/parameter_count.h"

namespace megatron {
namespace {

using namespace megatron::testing;

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

TEST(MlaPytorchGolden, MatchesPytorch) {
  for (const char* name : {"mla", "mla_rms", "mla_yarn"}) {
    SCOPED_TRACE(name);
    expect_matches_gpt_variants_golden(load_mla_golden(name), solo(), [](GptConfig&) {});
    // --qk-layernorm with MLA is Megatron-Core's latent norms, which the fixtures have.
    expect_matches_gpt_variants_golden(load_mla_golden(name), solo(),
                                       [](GptConfig& c) { c.arch.qk_layernorm = true; });
  }
}

TEST(MlaPytorchGolden, FlashAttentionAndRecomputeMatchPytorch) {
  for (const char* name : {"mla", "mla_rms", "mla_yarn"}) {
    SCOPED_TRACE(name);
    const GptVariantsGolden g = load_mla_golden(name);
    expect_matches_gpt_variants_golden(g, solo(), [](GptConfig& c) { c.flash_attention = true; });
    expect_matches_gpt_variants_golden(g, solo(),
                                       [](GptConfig& c) { c.recompute_activations = true; });
    expect_matches_gpt_variants_golden(g, solo(),
                                       [](GptConfig& c) { c.selective_recompute = true; });
  }
}

// The loss of `config` on the fixture's weights and batch.
double fixture_loss(const GptVariantsGolden& g, const GptConfig& config) {
  ParallelState ps = solo();
  ParameterStore store(0, 1, Device::CPU);
  GptModel model(config, ps, store);
  store.allocate();
  assign_from_full_tensors(g.weights, store);
  model.refresh_compute_weights();
  return model.forward_backward(g.batch, 1.0f, 1);
}

// The RoPE part is rotated: rotating other channel pairs (--rope-type rope with
// --rotary-interleaved) or at another base moves the loss by over 10 times the golden
// comparison's tolerance (1e-5 relative).
TEST(MlaPytorchGolden, RopePartChangesTheLoss) {
  const GptVariantsGolden g = load_mla_golden("mla");
  const double expected = g.file->get("loss").data<double>()[0];
  GptConfig c = g.config;
  c.arch.mla.yarn = false;
  EXPECT_NEAR(fixture_loss(g, c), expected, 1e-5 * expected);  // YaRN at factor 1 = RoPE
  c.arch.rotary_interleaved = true;
  EXPECT_GT(std::abs(fixture_loss(g, c) - expected), 1e-4 * expected);
  c = g.config;
  c.arch.rotary_base = 100.0f;
  EXPECT_GT(std::abs(fixture_loss(g, c) - expected), 1e-4 * expected);
}

// Each of YaRN's three effects is seen by the mla_yarn fixture: its frequencies (a smaller
// factor), its cos/sin factor (another --mscale) and its softmax temperature (--mscale-all-dim
// 0, which moves both of the last two): each moves the loss by over 5 times the golden
// comparison's tolerance (1e-5 relative).
TEST(MlaPytorchGolden, EveryYarnTermChangesTheLoss) {
  const GptVariantsGolden g = load_mla_golden("mla_yarn");
  const double expected = g.file->get("loss").data<double>()[0];
  for (int term = 0; term < 3; ++term) {
    SCOPED_TRACE(term);
    GptConfig c = g.config;
    if (term == 0) c.arch.yarn.factor = 20.0f;
    if (term == 1) c.arch.yarn.mscale = 0.8f;
    if (term == 2) c.arch.yarn.mscale_all_dim = 0.0f;
    EXPECT_GT(std::abs(fixture_loss(g, c) - expected), 5e-5 * expected);
  }
}

// bf16 GEMMs (f32 statistics and gradients): the loss within 1e-3 and the gradients within 2e-2
// of PyTorch's float64 (model_gpt_test's bf16 bounds), and not f32-exact (bf16 really ran).
TEST(MlaPytorchGolden, Bf16MatchesPytorch) {
  for (const char* name : {"mla", "mla_yarn"}) {
    SCOPED_TRACE(name);
    const GptVariantsGolden g = load_mla_golden(name);
    ParallelState ps = solo();
    ParameterStore store(0, 1, Device::CPU);
    GptConfig c = g.config;
    c.compute_dtype = DType::BF16;
    GptModel model(c, ps, store);
    store.allocate();
    assign_from_full_tensors(g.weights, store);
    model.refresh_compute_weights();
    store.zero_grads();
    const double expected = g.file->get("loss").data<double>()[0];
    EXPECT_NEAR(model.forward_backward(g.batch, 1.0f, 1), expected, 1e-3 * expected);
    double worst = 0;
    for (const Parameter& p : store.params())
      worst =
          std::max(worst, double(max_relative_error(
                              p.grad, local_slice(p, g.file->get("grad." + p.spec.name)).clone())));
    // mla_yarn's softmax temperature (1.295² = 1.68) sharpens its scores, which amplifies the
    // bf16 rounding of q·k: its gradients land within 3e-2.
    EXPECT_LE(worst, name == std::string("mla") ? 2e-2 : 3e-2);
    EXPECT_GT(worst, 1e-5);
  }
}

TEST(MlaPytorchGolden, PlannerCountsMlaParameters) {
  for (const char* name : {"mla", "mla_rms", "mla_yarn"}) {
    SCOPED_TRACE(name);
    const GptConfig c = mla_golden_config(name);
    ParallelState ps = solo();
    ParameterStore store(0, 1);
    GptModel model(c, ps, store);
    store.allocate();
    plan::ModelSpec m;
    static_cast<LanguageModelConfig&>(m) = c;
    m.make_vocab_size_divisible_by = 64;
    EXPECT_DOUBLE_EQ(plan::count_parameters(m, plan::Layout{}).total,
                     double(store.flat_values().numel()));
    EXPECT_EQ(plan::count_parameter_tensors(m, plan::Layout{}).max_rank(),
              int64_t(store.params().size()));
  }
}

TEST(MlaPytorchGolden, BadShapesAreRefusedByName) {
  auto message = [](auto adjust) {
    GptConfig c = mla_golden_config("mla");
    adjust(c);
    try {
      c.validate(1);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message([](GptConfig& c) {
              c.arch.mla.qk_pos_emb_head_dim = 3;
            }).find("--qk-pos-emb-head-dim must be a positive even number"),
            std::string::npos);
  EXPECT_NE(message([](GptConfig& c) { c.arch.mla.v_head_dim = 13; }).find("--v-head-dim 13"),
            std::string::npos);
  EXPECT_NE(
      message([](GptConfig& c) { c.arch.yarn.beta_fast = 16; }).find("drop the --yarn-* flags"),
      std::string::npos);
  EXPECT_NE(message([](GptConfig& c) { c.arch.yarn.factor = 0; }).find("--rotary-scaling-factor"),
            std::string::npos);
  EXPECT_EQ(message([](GptConfig& c) { c.arch.yarn.factor = 40; }), "");
  EXPECT_NE(message([](GptConfig& c) {
              c.arch.num_query_groups = 2;
            }).find("--group-query-attention and --multi-latent-attention"),
            std::string::npos);
  EXPECT_NE(message([](GptConfig& c) { c.arch.add_qkv_bias = true; }).find("--add-qkv-bias"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron
