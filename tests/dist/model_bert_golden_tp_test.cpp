// The PyTorch BERT golden (tests/data/bert_tiny) at TP = world size (1, 2, 4): the imported
// model split over the ranks reproduces PyTorch's losses, logits and every weight gradient
// (gathered and mapped back to HF layout) within the same tolerances as at TP = 1.
#include <gtest/gtest.h>

#include <cmath>

#include "../common/bert_golden.h"
#include "../common/gpt2_golden.h"  // max_relative_error
#include "tp_test_util.h"

namespace megatron {
namespace {

TEST(BertPytorchGoldenTp, LossesLogitsAndGradientsMatchPytorch) {
  testing::BertGolden g = testing::load_bert_golden(128);
  ParallelState ps = test::tp_world_state();
  testing::LoadedBert m(g, ps);
  const BertLosses losses = m.model->forward_backward(g.batch, 1.0f, 7);
  TensorMap ours;
  for (const Parameter& p : m.store.params())
    ours[p.spec.name] = test::gather_full(*ps.tp, p, p.grad);
  const BertOutputs out =
      m.model->forward_logits(g.batch.tokens, g.batch.token_types, g.batch.pad_mask);

  EXPECT_NEAR(losses.lm, g.golden("mlm_loss"), 1e-4 * g.golden("mlm_loss"));
  EXPECT_NEAR(losses.sop, g.golden("sop_loss"), 1e-4 * g.golden("sop_loss"));
  EXPECT_LE(testing::max_relative_error(out.mlm_logits, g.file->get("mlm_logits")), 1e-4);
  const TensorMap hf_grads = hf_tensors_from_bert(ours, m.model->config());
  for (const auto& [name, want] : g.hf_grads) {
    if (name.find("attention.self.key.bias") != std::string::npos) {  // exactly 0 (softmax shift)
      for (float v : hf_grads.at(name).to_vector<float>()) EXPECT_LT(std::fabs(v), 1e-6) << name;
      continue;
    }
    EXPECT_LE(testing::max_relative_error(hf_grads.at(name), want), 1e-3) << name;
  }
}

}  // namespace
}  // namespace megatron
