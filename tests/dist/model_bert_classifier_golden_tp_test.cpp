// The PyTorch finetuning golden (tests/data/bert_tiny/finetune_golden.safetensors) at TP =
// world size (1, 2, 4): the BERT classifier split over the ranks reproduces PyTorch's logits,
// first-iteration loss and gradients (gathered, mapped back to HF names) within the same
// tolerances as at TP = 1, for the multiple-choice (RACE) and the 3-class (MNLI) head.
#include <gtest/gtest.h>

#include <cmath>

#include "../common/finetune_golden.h"
#include "../common/gpt2_golden.h"  // max_relative_error
#include "tp_test_util.h"

namespace megatron {
namespace {

void expect_case_matches_pytorch(const std::string& name) {
  const testing::BertGolden g = testing::load_bert_golden(128);
  const testing::FinetuneCase c = testing::load_finetune_case(g, name);
  ParallelState ps = test::tp_world_state();
  testing::LoadedClassifier m(g, c, ps);
  EXPECT_LE(testing::max_relative_error(m.model->forward_logits(c.batch), c.logits), 1e-5);
  const float loss = m.model->forward_backward(c.batch, 1.0f, 7);
  EXPECT_NEAR(loss, c.loss, 1e-5 * c.loss) << name;
  TensorMap ours;
  for (const Parameter& p : m.store.params())
    ours[p.spec.name] = test::gather_full(*ps.tp, p, p.grad);
  const TensorMap hf = testing::hf_gradients(ours, c, g);
  for (const auto& [grad_name, want] : c.grads) {
    if (testing::gradient_is_exactly_zero(c, grad_name)) {
      for (float v : hf.at(grad_name).to_vector<float>()) EXPECT_LT(std::fabs(v), 1e-6) << name;
      continue;
    }
    EXPECT_LE(testing::max_relative_error(hf.at(grad_name), want), 1e-3)
        << name << " " << grad_name;
  }
}

TEST(BertClassifierPytorchGoldenTp, MultipleChoiceMatchesPytorch) {
  expect_case_matches_pytorch("race");
}

TEST(BertClassifierPytorchGoldenTp, ClassificationMatchesPytorch) {
  expect_case_matches_pytorch("mnli");
}

}  // namespace
}  // namespace megatron
