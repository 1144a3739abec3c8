// Knowledge distillation on `pretrain-gpt` (docs/distillation.md): the flags of Megatron-LM's
// ModelOpt integration (megatron/post_training/arguments.py) and the teacher's configuration.
//   --export-kd-teacher-load DIR  the teacher checkpoint (megatron-cpp, or Megatron-LM torch
//                                 format, converted once beside it as --load is); enables
//                                 distillation
//   --export-kd-cfg FILE          the distillation config YAML (cli/args/distillation_yaml.h);
//                                 Megatron's defaults without it
//   --export-te-mcore-model       Megatron: the checkpoint has Transformer-Engine's fused layer
//                                 names, remapped on load; accepted, nothing to remap here
// --auto-detect-ckpt-format (Megatron's training flag) is registered beside them: the format of
// --load and of the teacher is always detected from the directory here.
#pragma once

#include <optional>
#include <string>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/setup/gpt_setup.h"

namespace megatron::cli {

struct DistillationArgs {
  std::string teacher_load;
  std::string kd_cfg;
  bool te_mcore_model = false;
  bool auto_detect_ckpt_format = false;
};

void add_distillation_args(ArgTable& table, DistillationArgs& d);

// When the teacher is a Megatron-LM torch checkpoint: converts it (only when `writer`, e.g.
// rank 0; the others wait in the caller's run_on_all_ranks) unless an up-to-date copy exists,
// and points d.teacher_load at the copy (cli/setup/megatron_lm_load.h). Otherwise nothing.
void use_megatron_lm_teacher(DistillationArgs& d, const Args& args, bool writer);

// The teacher of validated student `args` (nullopt without --export-kd-teacher-load): its
// architecture read from its checkpoint's stored arguments (as --use-checkpoint-args), the
// student's vocabulary and parallel layout, the losses from --export-kd-cfg. Throws Error for
// a missing checkpoint, a bad YAML file, or a layout distillation does not run in (pipeline or
// context parallelism), naming the flag.
std::optional<GptTeacherConfig> teacher_config(const DistillationArgs& d, const Args& args,
                                               const Vocabulary& vocab);

}  // namespace megatron::cli
