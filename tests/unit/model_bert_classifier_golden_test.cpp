// BERT finetuning against PyTorch (tests/data/bert_tiny/finetune_golden.safetensors, written by
// tools/reference/finetune_reference.py): the tiny BERT body under Megatron's multiple-choice
// head (RACE layout) and classification head (MNLI, 3 classes) reproduces PyTorch's logits,
// first-iteration loss (relative ≤ 1e-5) and the gradients of the head, the pooler and body
// weights (≤ 1e-3, as the BERT pretraining golden; the multiple-choice bias's gradient is
// exactly 0, so both are checked to be ≤ 1e-6), in f32 at TP 1.
#include <gtest/gtest.h>

#include <cmath>

#include "../common/finetune_golden.h"
#include "../common/gpt2_golden.h"  // max_relative_error
#include "kernels/elementwise.h"
#include "model_test_util.h"

namespace megatron {
namespace {

using testing::max_relative_error;

constexpr int64_t kPaddedVocab = 128;  // vocab 100 padded: padding must not matter

void expect_case_matches_pytorch(const std::string& name) {
  const testing::BertGolden g = testing::load_bert_golden(kPaddedVocab);
  const testing::FinetuneCase c = testing::load_finetune_case(g, name);
  const ParallelState ps = test::solo_parallel_state();
  testing::LoadedClassifier m(g, c, ps);

  EXPECT_LE(max_relative_error(m.model->forward_logits(c.batch), c.logits), 1e-5) << name;
  const float loss = m.model->forward_backward(c.batch, 1.0f, 7);
  EXPECT_NEAR(loss, c.loss, 1e-5 * c.loss) << name;
  TensorMap ours;
  for (const Parameter& p : m.store.params()) ours[p.spec.name] = p.grad;
  const TensorMap hf = testing::hf_gradients(ours, c, g);
  ASSERT_FALSE(c.grads.empty());
  for (const auto& [grad_name, want] : c.grads) {
    ASSERT_TRUE(hf.count(grad_name)) << grad_name;
    if (testing::gradient_is_exactly_zero(c, grad_name)) {
      for (float v : hf.at(grad_name).to_vector<float>()) EXPECT_LT(std::fabs(v), 1e-6) << name;
      for (float v : want.to_vector<float>()) EXPECT_LT(std::fabs(v), 1e-6) << name;
      continue;
    }
    EXPECT_LE(max_relative_error(hf.at(grad_name), want), 1e-3) << name << " " << grad_name;
  }
}

TEST(BertClassifierPytorchGolden, MultipleChoiceRaceLayoutMatchesPytorch) {
  expect_case_matches_pytorch("race");
}

TEST(BertClassifierPytorchGolden, ThreeClassMnliLayoutMatchesPytorch) {
  expect_case_matches_pytorch("mnli");
}

// Gradients accumulate (+=) over micro-batches: two calls give twice one call's gradient.
TEST(BertClassifierPytorchGolden, GradientsAccumulate) {
  const testing::BertGolden g = testing::load_bert_golden(kPaddedVocab);
  const testing::FinetuneCase c = testing::load_finetune_case(g, "mnli");
  const ParallelState ps = test::solo_parallel_state();
  testing::LoadedClassifier m(g, c, ps);
  m.model->forward_backward(c.batch, 1.0f, 7);
  const Tensor once = m.store.get("pooler.dense.weight").grad.clone();
  m.model->forward_backward(c.batch, 1.0f, 7);
  Tensor twice = m.store.get("pooler.dense.weight").grad.clone();
  kernels::scale(twice, 0.5f);
  EXPECT_LE(max_relative_error(twice, once), 1e-6);
}

}  // namespace
}  // namespace megatron
