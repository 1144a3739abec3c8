// Knowledge distillation against PyTorch at TP = 1 (the fixture of
// tools/reference/distillation_reference.py): a 2-layer student distilled from a 3-layer
// teacher — the logits KL at a temperature, the final norms' cosine loss, ModelOpt's loss
// balancer with and without the LM loss — logged terms and every student gradient; the
// teacher stays frozen. tests/dist/model_distillation_tp_test.cpp runs the same at TP 2 and 4.
#include <gtest/gtest.h>

#include "../common/distillation_golden.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using namespace megatron::testing;

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

TEST(DistillationPytorchGolden, LmAndKdLossesMatchPytorch) {
  expect_matches_distillation_golden(load_distillation_golden(), solo(), "mixed", false);
}

TEST(DistillationPytorchGolden, SkipLmLossMatchesPytorch) {
  expect_matches_distillation_golden(load_distillation_golden(), solo(), "skip", false);
}

// Evaluation reports the LM loss even with skip_lm_loss (Megatron skips it in training only),
// and the balancer's total is the same function of the KD terms.
TEST(DistillationPytorchGolden, EvaluationReportsTheLmLoss) {
  const DistillationGolden g = load_distillation_golden();
  const ParallelState ps = solo();
  GptConfig tc = gpt_variants_config();
  tc.num_layers = 3;
  ParameterStore student_store(0, 1, Device::CPU), teacher_store(0, 1, Device::CPU);
  GptModel student(gpt_variants_config(), ps, student_store);
  GptModel teacher(tc, ps, teacher_store);
  student_store.allocate();
  teacher_store.allocate();
  assign_from_full_tensors(g.student, student_store);
  assign_from_full_tensors(g.teacher, teacher_store);
  student.refresh_compute_weights();
  teacher.refresh_compute_weights();
  Distillation kd(distillation_golden_config("skip"), teacher, student, ps);
  student.set_distillation(&kd);
  GptModel::StageCtxPtr ctx = student.make_stage_ctx();
  student.forward_stage(*ctx, g.batch, Tensor(), /*train=*/false, 0);
  const double count = student.stage_loss_sum(*ctx).count;
  const DistillationLossTerms& d = student.stage_distillation(*ctx);
  const double lm = g.file->get("mixed.lm").data<double>()[0];  // the same student and batch
  EXPECT_NEAR(d.lm / count, lm, 1e-5 * lm);
  EXPECT_NEAR(d.lm / count, student.stage_loss(*ctx), 1e-5 * lm);
  const double total = g.file->get("skip.total").data<double>()[0];
  EXPECT_NEAR(d.total / count, total, 1e-5 * total);
}

// ModelOpt's balancer, by hand: the intermediate loss is brought to the logits loss's size,
// and without skip_lm_loss the KD sum to the LM loss's, times kd_loss_scale.
TEST(DistillationBalancer, ScalesAsModelOpt) {
  DistillationConfig c;
  c.skip_lm_loss = false;
  c.kd_loss_scale = 3.0;
  auto [t, w] = balance_distillation_losses(c, /*lm=*/6.0, /*logits=*/2.0, /*inter=*/0.5, true);
  EXPECT_DOUBLE_EQ(t.lm, 6.0);
  EXPECT_DOUBLE_EQ(t.total, 6.0 + 3.0 * 6.0);  // kd = 2 + 0.5·4 = 4, brought to 6, times 3
  EXPECT_DOUBLE_EQ(w.lm, 1.0);
  EXPECT_DOUBLE_EQ(w.logits, 3.0 * 6.0 / 4.0);
  EXPECT_DOUBLE_EQ(w.intermediate, 3.0 * 6.0 / 4.0 * 4.0);
  c.skip_lm_loss = true;
  std::tie(t, w) = balance_distillation_losses(c, 6.0, 2.0, 0.5, true);
  EXPECT_DOUBLE_EQ(t.lm, 0.0);
  EXPECT_DOUBLE_EQ(t.total, 4.0);
  EXPECT_DOUBLE_EQ(w.lm, 0.0);
  EXPECT_DOUBLE_EQ(w.logits, 1.0);
  EXPECT_DOUBLE_EQ(w.intermediate, 4.0);
  // No LM loss (no scored token): the KD loss is not brought to its size, as ModelOpt's.
  c.skip_lm_loss = false;
  std::tie(t, w) = balance_distillation_losses(c, 0.0, 2.0, 0.5, true);
  EXPECT_DOUBLE_EQ(t.total, 3.0 * 4.0);
  EXPECT_DOUBLE_EQ(w.logits, 3.0);
  c.skip_lm_loss = true;
  // No intermediate pairs: the logits loss alone.
  std::tie(t, w) = balance_distillation_losses(c, 6.0, 2.0, 0.0, false);
  EXPECT_DOUBLE_EQ(t.lm, 6.0);
  EXPECT_DOUBLE_EQ(t.total, 2.0);
}

// A teacher that cannot be compared with the student is refused by name.
TEST(DistillationPytorchGolden, RefusesAnIncomparableTeacher) {
  const ParallelState ps = solo();
  GptConfig tc = gpt_variants_config();
  tc.hidden_size = 64;
  tc.ffn_hidden_size = 96;
  ParameterStore student_store(0, 1, Device::CPU), teacher_store(0, 1, Device::CPU);
  GptModel student(gpt_variants_config(), ps, student_store);
  GptModel teacher(tc, ps, teacher_store);
  try {
    Distillation kd(distillation_golden_config("skip"), teacher, student, ps);
    FAIL() << "a teacher of another width was accepted for an intermediate pair";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--hidden-size 64 differs from the student's 32"),
              std::string::npos)
        << e.what();
  }
  // Logits only: another width is fine.
  Distillation logits_only(DistillationConfig{}, teacher, student, ps);
}

}  // namespace
}  // namespace megatron
