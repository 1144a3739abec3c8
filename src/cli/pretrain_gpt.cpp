// `megatron pretrain-gpt` — Megatron-LM's pretrain_gpt.py: parse and validate the flags,
// print them, build the tokenizer and datasets (or --mock-data), then run the Trainer.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/megatron_flags.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "cli/setup/distillation_setup.h"
#include "cli/setup/gpt_setup.h"
#include "cli/setup/megatron_lm_load.h"
#include "cli/setup/megatron_lm_save.h"
#include "cli/setup/theoretical_memory.h"
#include "cli/setup/training_samples.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "distributed/agreement.h"
#include "distributed/backend.h"
#include "distributed/runtime.h"

namespace megatron::cli {

int run_pretrain_gpt(int argc, char** argv) {
  CLI::App app{"Pretrain a GPT model with tensor x pipeline x data parallelism (Megatron-LM flags)",
               "megatron pretrain-gpt"};
  Args args;
  bool eod_mask_loss = false;
  ArgTable table(app);
  add_training_args(table, args);
  add_architecture_args(table, args.arch);
  add_fim_args(table, args.fim);
  table.add_flag("--eod-mask-loss", eod_mask_loss, "mask the loss of end-of-document labels");
  bool per_token_loss = false;
  table.add_flag(
      "--calculate-per-token-loss", per_token_loss,
      "average the loss over the tokens of the whole global batch, not per micro-batch "
      "(Megatron's per-token loss; differs when loss masks differ between micro-batches)");
  table.add("--data-cache-path", args.data_cache_path,
            "directory for the sample-index cache (default: next to the data)");
  add_sharding_args(table, args);
  add_pipeline_args(table, args);
  add_context_parallel_args(table, args);
  add_expert_parallel_args(table, args);
  DistillationArgs distillation;
  add_distillation_args(table, distillation);
  SampleArgs samples;
  add_sample_args(table, samples);
  // Last: Megatron's flags that this command has not registered above.
  MegatronFlags megatron_flags(app);
  if (int rc = megatron_flags.parse(argc, argv); rc >= 0) return rc;
  // pretrain_gpt.py's default; --mock-data --vocab-size V needs no tokenizer here.
  if (args.tokenizer_type.empty() && !args.mock_data) args.tokenizer_type = "GPT2BPETokenizer";
  select_training_device(args);

  std::shared_ptr<Communicator> world =
      make_world_communicator(args.distributed_backend, args.compute_device);
  // Every rank validates the same flags and opens the same files: a failure is reported once,
  // by the lowest failing rank, and ends every rank (distributed/agreement.h).
  Vocabulary vocab;
  GptStepConfig model;
  GptDatasets data;
  // A Megatron-LM checkpoint in --load is converted by rank 0 before any rank reads it.
  run_on_all_ranks(*world, "", [&] {
    use_megatron_lm_load(args, world->rank() == 0);
    use_megatron_lm_teacher(distillation, args, world->rank() == 0);
  });
  run_on_all_ranks(*world, "", [&] {
    apply_checkpoint_args(args, CheckpointArgs::kShapeAndArchitecture);
    check_megatron_flags(megatron_flags, args);
    validate_training_args(args, world->size());
    if (args.log_args) log_line(table.format());
    vocab = build_vocabulary(args);
    model = gpt_step_config(args, vocab, eod_mask_loss);
    model.model.per_token_loss = per_token_loss;
    model.split = pipeline_split(args);
    model.microbatch_group = args.microbatch_group_size_per_virtual_pipeline_stage.value_or(0);
    model.teacher = teacher_config(distillation, args, vocab);
    check_sample_args(samples, args, vocab, model.model);
    data = build_gpt_data(args, vocab);
  });
  TrainerConfig config = trainer_config(args, table);
  run_on_all_ranks(*world, "", [&] { use_megatron_lm_save(config, args, model.model); });
  config.per_token_loss = per_token_loss;
  set_muon_qkv_layout(config, model.model);
  config.tokenizer = vocab.identity;
  if (samples.interval > 0) {
    config.sample_interval = samples.interval;
    config.sample = training_sampler(samples, vocab, args.seed);
  }
  config.theoretical_memory_report = theoretical_memory_report(plan_model_of(model.model, args),
                                                               plan_layout_of(args, model.split));
  Trainer trainer(std::move(config), world,
                  gpt_step_factory(std::move(model), data.train, data.valid, data.test));
  // Non-zero when the rerun state machine ends the job (docs/reliability.md).
  return trainer.run().exit_code;
}

}  // namespace megatron::cli
