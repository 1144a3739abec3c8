// Multi-token prediction (--mtp-num-layers, model/multi_token_prediction.h) against PyTorch: the
// fixtures of tools/reference/mtp_reference.py, a 2-layer GPT-2-style model with two depths
// (learned positions shifted with the tokens, the head tied to the word embedding, factor 0.3)
// and a Llama-style one with one depth (RoPE, RMSNorm, SwiGLU, an untied output layer). The
// main loss and each depth's loss (relative <= 1e-5), every gradient of main + factor/N · Σ L_k
// and their global norm, at TP 1, through the pipeline-stage entry points the trainer uses and
// through forward_backward. The depths' losses move the gradients (a factor of 0 misses the
// fixture), and shift_sequence_left is Megatron's roll with zero fill.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "../common/gpt2_golden.h"
#include "../common/gpt_variants_golden.h"
#include "distributed/solo_communicator.h"
#include "kernels/elementwise.h"

namespace megatron {
namespace {

using namespace megatron::testing;

// The reference script's two models (its MODELS and constants).
GptConfig mtp_config(bool llama) {
  GptConfig c = tiny_reference_gpt(llama ? 48 : 64);
  if (llama) {
    ArchitectureOptions& a = c.arch;
    a.position_embedding = PositionEmbedding::kRope;
    a.normalization = Normalization::kRMSNorm;
    a.swiglu = true;
    a.add_bias_linear = false;
    a.untie_embeddings_and_output_weights = true;
    a.mtp = {.num_layers = 1, .loss_scaling_factor = 0.1f};
  } else {
    c.gelu = kernels::GeluForm::kErf;
    c.arch.mtp = {.num_layers = 2, .loss_scaling_factor = 0.3f};
  }
  return c;
}

struct MtpGolden {
  std::unique_ptr<SafetensorsReader> file;
  GptBatch batch;
  TensorMap weights;

  explicit MtpGolden(const std::string& model)
      : file(std::make_unique<SafetensorsReader>(source_dir() + "/tests/data/mtp/" + model +
                                                 ".safetensors")) {
    batch.tokens = file->get("input_ids");
    batch.labels = file->get("labels");
    batch.loss_mask = file->get("loss_mask");
    for (const std::string& name : file->names())
      if (name.rfind("w.", 0) == 0) weights[name.substr(2)] = file->get(name);
  }
  double loss() const { return file->get("loss").data<double>()[0]; }
  std::vector<double> mtp_losses() const { return file->get("mtp_losses").to_vector<double>(); }
  Tensor grad(const std::string& name) const { return file->get("grad." + name); }
};

struct Loaded {
  ParallelState ps = ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
  ParameterStore store{0, 1, Device::CPU};
  GptModel model;
  Loaded(const GptConfig& c, const MtpGolden& g) : model(c, ps, store) {
    store.allocate();
    assign_from_full_tensors(g.weights, store);
    model.refresh_compute_weights();
    store.zero_grads();
  }
};

// Every parameter's gradient against the fixture's, and the global gradient norm.
void expect_gradients_match(const ParameterStore& store, const MtpGolden& g) {
  double norm = 0, golden_norm = 0;
  for (const Parameter& p : store.params()) {
    SCOPED_TRACE(p.spec.name);
    const Tensor expected = g.grad(p.spec.name);
    EXPECT_LE(max_relative_error(p.grad, expected), 1e-4);
    norm += kernels::sum_squares(p.grad);
    golden_norm += kernels::sum_squares(expected);
  }
  EXPECT_NEAR(std::sqrt(norm), std::sqrt(golden_norm), 1e-5 * std::sqrt(golden_norm));
}

class MtpPytorchGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(MtpPytorchGolden, LossesAndGradientsMatchThroughTheStageEntryPoints) {
  const MtpGolden g(GetParam());
  Loaded l(mtp_config(GetParam() == "llama_n1"), g);
  // The fixture names exactly the model's parameters: the depths' are Megatron's names.
  ASSERT_EQ(l.store.params().size(), g.weights.size());
  for (const auto& [name, tensor] : g.weights) EXPECT_TRUE(l.store.contains(name)) << name;

  auto ctx = l.model.make_stage_ctx();
  EXPECT_FALSE(l.model.forward_stage(*ctx, g.batch, Tensor(), true, 99).defined());
  EXPECT_NEAR(l.model.stage_loss(*ctx), g.loss(), 1e-5 * g.loss());
  const std::vector<double> mtp = l.model.stage_mtp_losses(*ctx), expected = g.mtp_losses();
  ASSERT_EQ(mtp.size(), expected.size());
  for (size_t k = 0; k < mtp.size(); ++k) EXPECT_NEAR(mtp[k], expected[k], 1e-5 * expected[k]);
  l.model.backward_stage(*ctx, Tensor(), 1.0f);
  expect_gradients_match(l.store, g);

  // Evaluation: the main loss alone, the depths not run.
  EXPECT_FALSE(l.model.forward_stage(*ctx, g.batch, Tensor(), false, 0).defined());
  EXPECT_NEAR(l.model.stage_loss(*ctx), g.loss(), 1e-5 * g.loss());
  EXPECT_TRUE(l.model.stage_mtp_losses(*ctx).empty());
}

TEST_P(MtpPytorchGolden, ForwardBackwardMatches) {
  const MtpGolden g(GetParam());
  Loaded l(mtp_config(GetParam() == "llama_n1"), g);
  EXPECT_NEAR(l.model.forward_backward(g.batch, 1.0f, 5), g.loss(), 1e-5 * g.loss());
  expect_gradients_match(l.store, g);
}

// Without the depths' losses in the gradient the fixture's gradients are missed by far.
TEST_P(MtpPytorchGolden, TheDepthsMoveTheGradients) {
  const MtpGolden g(GetParam());
  GptConfig c = mtp_config(GetParam() == "llama_n1");
  c.arch.mtp.loss_scaling_factor = 0.0f;
  Loaded l(c, g);
  l.model.forward_backward(g.batch, 1.0f, 5);
  const Parameter& word = l.store.get("embedding.word_embeddings.weight");
  EXPECT_GT(max_relative_error(word.grad, g.grad(word.spec.name)), 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Models, MtpPytorchGolden, ::testing::Values("gpt_n2", "llama_n1"));

TEST(ShiftSequenceLeft, RollsWithZeroFill) {
  Arena arena(Device::CPU);
  // [s = 4, b = 2] sequence-major: row i is position i.
  const Tensor ids = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  EXPECT_EQ(shift_sequence_left(ids, 1, arena).to_vector<int32_t>(),
            (std::vector<int32_t>{3, 4, 5, 6, 7, 8, 0, 0}));
  EXPECT_EQ(shift_sequence_left(ids, 3, arena).to_vector<int32_t>(),
            (std::vector<int32_t>{7, 8, 0, 0, 0, 0, 0, 0}));
  const Tensor mask = Tensor::from_vector<float>({1, 1, 0, 1, 1, 1, 1, 0}, {4, 2});
  EXPECT_EQ(shift_sequence_left(mask, 2, arena).to_vector<float>(),
            (std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0}));
}

}  // namespace
}  // namespace megatron
