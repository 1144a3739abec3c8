// `megatron pretrain-gpt` — Megatron-LM's pretrain_gpt.py: parse and validate the flags,
// print them, build the tokenizer and datasets (or --mock-data), then run the Trainer.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/megatron_flags.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "cli/setup/gpt_setup.h"
#include "cli/setup/theoretical_memory.h"
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
  table.add_flag("--eod-mask-loss", eod_mask_loss, "mask the loss of end-of-document labels");
  table.add("--data-cache-path", args.data_cache_path,
            "directory for the sample-index cache (default: next to the data)");
  add_sharding_args(table, args);
  add_context_parallel_args(table, args);
  int layers_per_virtual_stage = 0;
  table.add("--num-layers-per-virtual-pipeline-stage", layers_per_virtual_stage,
            "layers per model chunk: the interleaved 1F1B schedule (docs/parallelism.md)");
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
  run_on_all_ranks(*world, "", [&] {
    apply_checkpoint_args(args);
    check_megatron_flags(megatron_flags, args);
    validate_training_args(args, world->size());
    log_line(table.format());
    vocab = build_vocabulary(args);
    model = gpt_step_config(args, vocab, eod_mask_loss);
    model.pipeline_chunks = pipeline_chunks(args, layers_per_virtual_stage);
    data = build_gpt_data(args, vocab);
  });
  TrainerConfig config = trainer_config(args, table);
  config.tokenizer = vocab.identity;
  config.theoretical_memory_report = theoretical_memory_report(
      plan_model_of(model.model, args), plan_layout_of(args, model.pipeline_chunks));
  // The planner (plan/) models no context parallelism yet: its figures are a CP 1 rank's.
  if (args.context_parallel_size > 1)
    log_warning("the theoretical memory report does not model --context-parallel-size " +
                std::to_string(args.context_parallel_size) +
                ": its activations are those of whole sequences");
  Trainer trainer(std::move(config), world,
                  gpt_step_factory(std::move(model), data.train, data.valid, data.test));
  trainer.run();
  return 0;
}

}  // namespace megatron::cli
