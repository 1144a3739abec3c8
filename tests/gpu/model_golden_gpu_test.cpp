// The PyTorch goldens on a GPU: GPT-2 (tests/data/gpt2_tiny) and BERT (tests/data/bert_tiny)
// imported into models whose parameters and activations live on cuda:0 must reproduce
// PyTorch's logits, losses and gradients with the tolerances of the CPU golden tests
// (tests/unit/*_pytorch_golden_test.cpp). Skipped where no GPU is visible.
#include <gtest/gtest.h>

#include <cmath>

#include "../common/bert_golden.h"
#include "../common/gpt2_golden.h"
#include "core/device_runtime.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using namespace megatron::testing;

#define SKIP_WITHOUT_GPU() \
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible"

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

// name -> host copy of each parameter's gradient (the HF converters read host tensors).
TensorMap host_grads(const ParameterStore& store) {
  TensorMap out;
  for (const Parameter& p : store.params()) out[p.spec.name] = p.grad.to(Device::CPU);
  return out;
}

TEST(Gpt2PytorchGoldenGpu, LogitsLossAndGradientsMatchPytorch) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  Gpt2Golden g = load_gpt2_golden(128);  // vocab 96 padded to 128
  Gpt2FromFixture m(g, solo(), gpu);
  ASSERT_EQ(m.store.flat_values().device(), gpu);

  Tensor logits = m.model->forward_logits(g.batch.tokens);
  EXPECT_EQ(logits.device(), gpu);
  EXPECT_LE(max_relative_error(logits, g.file->get("logits")), 1e-4);

  m.store.zero_grads();
  const double loss = m.model->forward_backward(g.batch, 1.0f, 1234);
  EXPECT_NEAR(loss, golden_loss(g), 1e-4 * golden_loss(g));
  EXPECT_NEAR(m.model->forward_loss(g.batch), golden_loss(g), 1e-4 * golden_loss(g));

  TensorMap hf = hf_tensors_from_gpt(host_grads(m.store), g.config);
  ASSERT_EQ(hf.size(), g.hf_grads.size());
  for (const auto& [name, expected] : g.hf_grads) {
    SCOPED_TRACE(name);
    ASSERT_EQ(hf.count(name), 1u);
    EXPECT_LE(max_relative_error(hf.at(name), expected), 1e-3);
  }
  Tensor padded_rows = m.store.get("embedding.word_embeddings.weight").grad.slice(0, 96, 128);
  for (float v : padded_rows.to_vector<float>()) ASSERT_EQ(v, 0.0f);
}

TEST(Gpt2PytorchGoldenGpu, SameAsTheCpuModel) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  Gpt2Golden g = load_gpt2_golden(128);
  Gpt2FromFixture cpu(g, solo()), dev(g, solo(), gpu);
  cpu.store.zero_grads();
  dev.store.zero_grads();
  const double a = cpu.model->forward_backward(g.batch, 1.0f, 1234);
  const double b = dev.model->forward_backward(g.batch, 1.0f, 1234);
  EXPECT_NEAR(b, a, 1e-5 * std::fabs(a));
  EXPECT_LE(max_relative_error(dev.store.flat_grads(), cpu.store.flat_grads()), 1e-4);
}

TEST(BertPytorchGoldenGpu, LogitsLossesAndGradientsMatchPytorch) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  BertGolden g = load_bert_golden(128);  // vocab 100 padded to 128
  LoadedBert m(g, solo(), gpu);
  ASSERT_EQ(m.store.flat_values().device(), gpu);
  const BertLosses losses = m.model->forward_backward(g.batch, 1.0f, 7);
  EXPECT_NEAR(losses.lm, g.golden("mlm_loss"), 1e-4 * g.golden("mlm_loss"));
  EXPECT_NEAR(losses.sop, g.golden("sop_loss"), 1e-4 * g.golden("sop_loss"));
  const BertLosses eval = m.model->forward_loss(g.batch);
  EXPECT_NEAR(eval.total(), g.golden("loss"), 1e-4 * g.golden("loss"));

  const TensorMap hf_grads = hf_tensors_from_bert(host_grads(m.store), m.model->config());
  EXPECT_EQ(hf_grads.size(), g.hf_grads.size());
  for (const auto& [name, want] : g.hf_grads) {
    ASSERT_TRUE(hf_grads.count(name)) << name;
    // The key bias's exact gradient is zero (see the CPU test): compare absolutely.
    if (name.find("attention.self.key.bias") != std::string::npos) {
      for (float v : hf_grads.at(name).to_vector<float>()) EXPECT_LT(std::fabs(v), 1e-6) << name;
    } else {
      EXPECT_LE(max_relative_error(hf_grads.at(name), want), 1e-3) << name;
    }
  }

  const BertOutputs out =
      m.model->forward_logits(g.batch.tokens, g.batch.token_types, g.batch.pad_mask);
  EXPECT_EQ(out.mlm_logits.device(), gpu);
  EXPECT_LE(max_relative_error(out.mlm_logits, g.file->get("mlm_logits")), 1e-4);
  EXPECT_LE(max_relative_error(out.sop_logits, g.file->get("sop_logits")), 1e-4);
}

TEST(BertPytorchGoldenGpu, BadLabelIsTheCpuError) {
  SKIP_WITHOUT_GPU();
  const Device gpu = Device::cuda(0);
  use_device(gpu);
  BertGolden g = load_bert_golden(128);
  LoadedBert m(g, solo(), gpu);
  BertBatch bad = g.batch;
  std::vector<int32_t> labels = bad.masked_labels.to_vector<int32_t>();
  ASSERT_FALSE(labels.empty());
  labels.back() = 100;  // the vocabulary is [0, 100)
  bad.masked_labels = Tensor::from_vector(labels, {int64_t(labels.size())});
  try {
    m.model->forward_loss(bad);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("BERT MLM label 100 at a masked position"), std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace megatron
