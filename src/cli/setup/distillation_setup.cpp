#include "cli/setup/distillation_setup.h"

#include "checkpoint/layout.h"
#include "cli/args/distillation_yaml.h"
#include "cli/args/training_config.h"
#include "cli/setup/megatron_lm_load.h"
#include "core/error.h"
#include "core/logging.h"

namespace megatron::cli {

void add_distillation_args(ArgTable& table, DistillationArgs& d) {
  table.add("--export-kd-teacher-load", d.teacher_load,
            "knowledge distillation: the teacher's checkpoint directory (megatron-cpp or "
            "Megatron-LM torch format; its architecture from its stored arguments), run "
            "frozen beside the student (docs/distillation.md)");
  table.add("--export-kd-cfg", d.kd_cfg,
            "knowledge distillation: the distillation config YAML (logit_layers, "
            "intermediate_layer_pairs, skip_lm_loss, kd_loss_scale, logit_kl_temperature); "
            "Megatron's defaults without it");
  table.add_flag("--export-te-mcore-model", d.te_mcore_model,
                 "Megatron: remap a Transformer-Engine checkpoint's fused layer names on load for "
                 "ModelOpt; accepted, checkpoints here have one naming (nothing to remap)");
  table.add_flag("--auto-detect-ckpt-format", d.auto_detect_ckpt_format,
                 "detect the format of the checkpoints to load; always done here: --load and "
                 "--export-kd-teacher-load are read as megatron-cpp or Megatron-LM torch "
                 "checkpoints by what their directories hold");
}

void use_megatron_lm_teacher(DistillationArgs& d, const Args& args, bool writer) {
  if (d.teacher_load.empty()) return;
  Args teacher = args;
  teacher.load = d.teacher_load;
  // Only the teacher's weights are read (as Megatron loads it, with args.finetune set).
  teacher.finetune = true;
  use_megatron_lm_load(teacher, writer);
  d.teacher_load = teacher.load;
}

std::optional<GptTeacherConfig> teacher_config(const DistillationArgs& d, const Args& args,
                                               const Vocabulary& vocab) {
  if (d.teacher_load.empty()) {
    MT_REQUIRE(d.kd_cfg.empty(),
               "--export-kd-cfg needs --export-kd-teacher-load (the teacher checkpoint to "
               "distill from)");
    return std::nullopt;
  }
  MT_REQUIRE(args.pipeline_model_parallel_size == 1,
             "--export-kd-teacher-load: knowledge distillation runs with "
             "--pipeline-model-parallel-size 1 here (Megatron runs each stage's share of the "
             "teacher's layers beside the student's; not implemented), got ",
             args.pipeline_model_parallel_size);
  MT_REQUIRE(args.context_parallel_size == 1,
             "--export-kd-teacher-load: knowledge distillation runs with "
             "--context-parallel-size 1 here, got ",
             args.context_parallel_size);
  MT_REQUIRE(read_latest_iteration(d.teacher_load).has_value(), "--export-kd-teacher-load ",
             d.teacher_load,
             " holds no checkpoint (no latest_checkpointed_iteration.txt): give the directory a "
             "teacher model was saved to (its --save)");
  Args teacher = args;
  teacher.load = d.teacher_load;
  teacher.arch.use_checkpoint_args = true;
  apply_checkpoint_args(teacher, CheckpointArgs::kShapeAndArchitecture);
  GptTeacherConfig t;
  t.model = gpt_step_config(teacher, vocab, false).model;
  t.load = d.teacher_load;
  t.losses = d.kd_cfg.empty() ? DistillationConfig{} : read_distillation_config(d.kd_cfg);
  if (d.kd_cfg.empty())
    log_info("WARNING: no --export-kd-cfg: distilling the logits only, at Megatron's defaults");
  log_info("distillation: teacher ", d.teacher_load, " (", t.model.num_layers, " layers, hidden ",
           t.model.hidden_size, "), ", t.losses.intermediate_layer_pairs.size(),
           " intermediate pair(s), skip_lm_loss ", t.losses.skip_lm_loss ? "true" : "false",
           ", kd_loss_scale ", t.losses.kd_loss_scale, ", temperature ",
           t.losses.logit_kl_temperature);
  return t;
}

}  // namespace megatron::cli
