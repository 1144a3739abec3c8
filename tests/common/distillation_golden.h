// The PyTorch golden fixture of knowledge distillation (tests/data/distillation, written by
// tools/reference/distillation_reference.py): a 2-layer student and a 3-layer teacher of
// gpt_variants_golden.h's architecture, one batch, and per case ("mixed": LM + KD losses with
// kd_loss_scale 2 and temperature 2; "skip": skip_lm_loss at scale and temperature 1) the
// logged terms and the student's gradients. Loads both models at any TP rank and compares.
#pragma once

#include <memory>
#include <string>

#include "../common/gpt_variants_golden.h"
#include "kernels/elementwise.h"
#include "model/distillation.h"

namespace megatron::testing {

struct DistillationGolden {
  std::unique_ptr<SafetensorsReader> file;
  GptBatch batch;
  TensorMap student, teacher;  // our name -> full tensor
};

inline DistillationGolden load_distillation_golden() {
  DistillationGolden g;
  g.file = std::make_unique<SafetensorsReader>(source_dir() +
                                               "/tests/data/distillation/golden.safetensors");
  g.batch.tokens = g.file->get("input_ids");
  g.batch.labels = g.file->get("labels");
  g.batch.loss_mask = g.file->get("loss_mask");
  for (const std::string& name : g.file->names()) {
    if (name.rfind("s.", 0) == 0) g.student[name.substr(2)] = g.file->get(name);
    if (name.rfind("t.", 0) == 0) g.teacher[name.substr(2)] = g.file->get(name);
  }
  return g;
}

// The reference script's settings of `name`, with the final norms as the intermediate pair.
inline DistillationConfig distillation_golden_config(const std::string& name) {
  DistillationConfig c;
  c.intermediate_layer_pairs = {{"decoder.final_layernorm", "decoder.final_layernorm"}};
  c.skip_lm_loss = name == "skip";
  c.kd_loss_scale = name == "skip" ? 1.0 : 2.0;
  c.logit_kl_temperature = name == "skip" ? 1.0 : 2.0;
  return c;
}

// One training micro-batch of the student distilled from the teacher at `ps` (with sequence
// parallelism when `sequence_parallel`): the logged terms (<= 1e-5 relative) and every
// gradient slice of this rank (<= 1e-3 relative) against case `name`.
inline void expect_matches_distillation_golden(const DistillationGolden& g, const ParallelState& ps,
                                               const std::string& name, bool sequence_parallel) {
  GptConfig sc = gpt_variants_config();
  sc.sequence_parallel = sequence_parallel;
  GptConfig tc = sc;
  tc.num_layers = 3;
  ParameterStore student_store(ps.tp_rank, ps.tp_size, Device::CPU);
  ParameterStore teacher_store(ps.tp_rank, ps.tp_size, Device::CPU);
  GptModel student(sc, ps, student_store);
  GptModel teacher(tc, ps, teacher_store);
  student_store.allocate();
  teacher_store.allocate();
  assign_from_full_tensors(g.student, student_store);
  assign_from_full_tensors(g.teacher, teacher_store);
  student.refresh_compute_weights();
  teacher.refresh_compute_weights();
  Distillation kd(distillation_golden_config(name), teacher, student, ps);
  student.set_distillation(&kd);

  GptModel::StageCtxPtr ctx = student.make_stage_ctx();
  student.forward_stage(*ctx, g.batch, Tensor(), /*train=*/true, 1234);
  const DistillationLossTerms& d = student.stage_distillation(*ctx);
  const double count = student.stage_loss_sum(*ctx).count;
  for (auto [term, value] :
       {std::pair{"lm", d.lm}, std::pair{"total", d.total}, std::pair{"logits", d.logits},
        std::pair{"intermediate", d.intermediate}}) {
    const double expected = g.file->get(name + "." + term).data<double>()[0];
    EXPECT_NEAR(value / count, expected, 1e-5 * std::abs(expected)) << term;
  }
  student_store.zero_grads();
  student.backward_stage(*ctx, Tensor(), 1.0f);
  reduce_sequence_parallel_gradients(student_store, ps, nullptr, 0, student_store.params().size());
  for (const Parameter& p : student_store.params()) {
    SCOPED_TRACE(p.spec.name);
    EXPECT_LE(max_relative_error(
                  p.grad, local_slice(p, g.file->get(name + ".grad." + p.spec.name)).clone()),
              1e-3);
  }
  // The teacher is frozen: no gradient reached it.
  EXPECT_EQ(kernels::count_zeros(teacher_store.flat_grads()), teacher_store.flat_grads().numel());
}

}  // namespace megatron::testing
