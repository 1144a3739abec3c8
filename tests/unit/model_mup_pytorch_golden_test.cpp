// muP (--use-mup, model/transformer_config.h MupOptions) against PyTorch: the fixture of
// tools/reference/mup_reference.py (a 2-layer GPT-2-style model at width 32 on a base width of
// 16, embedding multiplier 1.5): logits, loss and every gradient at TP 1; then one AdamW step
// from the fixture's gradients with the learning rates of the LrSchedule (the hidden matrices at
// lr / m, eps / m) against torch.optim.AdamW in Megatron's muP groups. Each muP ingredient moves
// the loss or the step (the fixture sees them), and the init draws the hidden matrices at σ/√m.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "../common/gpt2_golden.h"
#include "../common/gpt_variants_golden.h"
#include "distributed/solo_communicator.h"
#include "kernels/elementwise.h"
#include "optim/lr_schedule.h"
#include "optim/optimizer.h"

namespace megatron {
namespace {

using namespace megatron::testing;

// The reference script's model and muP options (its constants).
GptConfig mup_config() {
  GptConfig c = tiny_reference_gpt(64);
  c.arch.mup.enabled = true;
  c.arch.mup.base_hidden_size = 16;
  c.arch.mup.embedding_mult = 1.5f;
  return c;
}
constexpr double kLr = 1e-2, kWeightDecay = 0.1, kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-3;

struct MupGolden {
  std::unique_ptr<SafetensorsReader> file =
      std::make_unique<SafetensorsReader>(source_dir() + "/tests/data/mup/golden.safetensors");
  GptBatch batch;
  TensorMap weights;

  MupGolden() {
    batch.tokens = file->get("input_ids");
    batch.labels = file->get("labels");
    batch.loss_mask = file->get("loss_mask");
    for (const std::string& name : file->names())
      if (name.rfind("w.", 0) == 0) weights[name.substr(2)] = file->get(name);
  }
  double loss() const { return file->get("loss").data<double>()[0]; }
};

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

struct Loaded {
  ParallelState ps = solo();
  ParameterStore store{0, 1, Device::CPU};
  GptModel model;
  Loaded(const GptConfig& c, const MupGolden& g) : model(c, ps, store) {
    store.allocate();
    assign_from_full_tensors(g.weights, store);
    model.refresh_compute_weights();
  }
};

// One step of the optimizer the trainer builds for muP at width multiplier `m`, on the
// fixture's gradients: the learning rates come from the schedule (constant at kLr).
void step_from_golden_gradients(Loaded& l, const MupGolden& g, double m) {
  for (Parameter& p : l.store.params())
    kernels::copy(local_slice(p, g.file->get("grad." + p.spec.name)), p.grad);
  LrScheduleConfig sc;
  sc.max_lr = kLr;
  sc.style = LrDecayStyle::Constant;
  sc.mup_width_mult = m;
  const LrSchedule schedule(sc);
  AdamWConfig config;
  config.beta1 = kBeta1;
  config.beta2 = kBeta2;
  config.eps = kEps;
  config.weight_decay = kWeightDecay;
  config.mup_width_mult = m;
  AdamW adam(l.store, config);
  adam.set_mup_hidden_lr(schedule.mup_hidden_lr());
  adam.step(schedule.lr());
}

TEST(MupPytorchGolden, ForwardAndGradientsMatchPytorch) {
  const MupGolden g;
  Loaded l(mup_config(), g);
  EXPECT_LE(max_relative_error(l.model.forward_logits(g.batch.tokens), g.file->get("logits")),
            1e-4);
  l.store.zero_grads();
  const double loss = l.model.forward_backward(g.batch, 1.0f, 1234);
  EXPECT_NEAR(loss, g.loss(), 1e-5 * g.loss());
  ASSERT_EQ(l.store.params().size(), g.weights.size());
  for (const Parameter& p : l.store.params()) {
    SCOPED_TRACE(p.spec.name);
    EXPECT_LE(
        max_relative_error(p.grad, local_slice(p, g.file->get("grad." + p.spec.name)).clone()),
        1e-3);
  }
}

TEST(MupPytorchGolden, OneAdamWStepMatchesPytorchGroups) {
  const MupGolden g;
  Loaded l(mup_config(), g);
  step_from_golden_gradients(l, g, 2.0);
  for (const Parameter& p : l.store.params()) {
    SCOPED_TRACE(p.spec.name);
    const Tensor expected = local_slice(p, g.file->get("step." + p.spec.name)).clone();
    const std::vector<float> a = p.value.to_vector<float>(), e = expected.to_vector<float>();
    ASSERT_EQ(a.size(), e.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], 2e-6) << "element " << i;
  }
}

// Without the muP groups (width multiplier 1 in the optimizer) the step differs from the
// fixture's by far more than the tolerance; so does the loss without each model ingredient.
TEST(MupPytorchGolden, EveryIngredientIsSeen) {
  const MupGolden g;
  {
    Loaded l(mup_config(), g);
    step_from_golden_gradients(l, g, 1.0);
    const Parameter& qkv = l.store.get("layers.0.self_attention.query_key_value.weight");
    EXPECT_GT(max_relative_error(qkv.value, g.file->get("step." + qkv.spec.name)), 1e-3);
  }
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    GptConfig c = mup_config();
    if (variant == 0) c.arch.mup.embedding_mult = 1.0f;
    if (variant == 1) c.arch.mup.output_mult = 0.75f;     // instead of 1/m
    if (variant == 2) c.arch.mup.attn_scale_power = 0.5;  // the standard 1/√d
    Loaded l(c, g);
    EXPECT_GT(std::abs(l.model.forward_backward(g.batch, 1.0f, 1) - g.loss()), 1e-4 * g.loss());
  }
}

// The init: hidden matrices σ/√m (the residual output projections σ/(√(2L)·√m)), the embeddings
// σ, as Megatron's muP init methods; checked on the sample standard deviations.
TEST(MupPytorchGolden, InitScalesTheHiddenMatricesOnly) {
  GptConfig c = mup_config();
  c.hidden_size = 64;  // m = 4; more samples
  c.ffn_hidden_size = 256;
  c.vocab_size = c.padded_vocab_size = 512;
  c.max_position_embeddings = c.seq_length = 256;
  c.init_method_std = 0.02f;
  ParallelState ps = solo();
  ParameterStore store(0, 1, Device::CPU);
  GptModel model(c, ps, store);
  store.allocate();
  model.init_weights(11);
  auto sample_std = [&](const std::string& name) {
    const std::vector<float> v = store.get(name).value.to_vector<float>();
    double sq = 0;
    for (float x : v) sq += double(x) * double(x);
    return std::sqrt(sq / double(v.size()));
  };
  const double sigma = 0.02, m = 4.0, tol = 0.05;  // relative: >= 12k samples each
  EXPECT_NEAR(sample_std("embedding.word_embeddings.weight") / sigma, 1.0, tol);
  EXPECT_NEAR(sample_std("embedding.position_embeddings.weight") / sigma, 1.0, tol);
  EXPECT_NEAR(sample_std("layers.0.self_attention.query_key_value.weight") / (sigma / 2), 1.0, tol);
  EXPECT_NEAR(sample_std("layers.1.mlp.dense_h_to_4h.weight") / (sigma / std::sqrt(m)), 1.0, tol);
  const double out = sigma / std::sqrt(2.0 * c.num_layers) / std::sqrt(m);
  EXPECT_NEAR(sample_std("layers.0.self_attention.dense.weight") / out, 1.0, tol);
  EXPECT_NEAR(sample_std("layers.1.mlp.dense_4h_to_h.weight") / out, 1.0, tol);
}

// Megatron's attention scale under muP: √base_head_dim / d^power.
TEST(MupPytorchGolden, SoftmaxScale) {
  GptConfig c = mup_config();  // head_dim 8
  EXPECT_FLOAT_EQ(c.softmax_scale(), 1.0f / 8.0f);
  c.arch.mup.base_head_dim = 4.0;
  EXPECT_FLOAT_EQ(c.softmax_scale(), 2.0f / 8.0f);
  c.arch.mup.attn_scale_power = 0.5;
  EXPECT_FLOAT_EQ(c.softmax_scale(), float(2.0 / std::sqrt(8.0)));
  c.arch.mup.enabled = false;
  EXPECT_FLOAT_EQ(c.softmax_scale(), float(1.0 / std::sqrt(8.0)));
  EXPECT_FLOAT_EQ(c.logit_mult(), 1.0f);
}

}  // namespace
}  // namespace megatron
