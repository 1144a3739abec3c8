// `megatron finetune --task RACE|MNLI|QQP` — Megatron-LM's BERT finetuning (tasks/main.py with
// tasks/race/ and tasks/glue/): read and tokenize the task's files, build the BERT classifier
// (RACE: multiple choice over 4 options; MNLI: 3 classes; QQP: 2), load the pretrained body
// from --pretrained-checkpoint under a fresh head, then train --epochs epochs on the Trainer
// of pretraining, printing the validation accuracy of each --valid-data set after every epoch
// and keeping the best epoch's checkpoint in SAVE/best. See docs/tasks.md.
#include <CLI/CLI.hpp>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/megatron_flags.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "cli/setup/bert_setup.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "data/tokenizers/make_tokenizer.h"
#include "data/tokenizers/tokenizer_identity.h"
#include "distributed/agreement.h"
#include "distributed/backend.h"
#include "distributed/runtime.h"
#include "tasks/finetune_data.h"
#include "tasks/finetune_dataset.h"
#include "tasks/finetune_step.h"
#include "train/trainer.h"

namespace megatron::cli {

namespace {

struct FinetuneFlags {
  std::string task;
  std::vector<std::string> train_data, valid_data;
  std::string pretrained_checkpoint;
  int64_t epochs = -1;
  BertLayerNormFlags layernorm;
};

// The samples of `paths` read as `task`'s files and tokenized, as one dataset called `name`.
FinetuneDataset read_task_data(const std::string& task, const std::string& name,
                               const std::vector<std::string>& paths, const Tokenizer& tokenizer,
                               int64_t seq_length) {
  FinetuneDataset d;
  if (task == "RACE") {
    std::vector<RaceQuestion> questions;
    for (const std::string& path : paths) {
      std::vector<RaceQuestion> q = read_race(path);
      questions.insert(questions.end(), q.begin(), q.end());
    }
    d = race_dataset(name, questions, tokenizer, seq_length);
  } else {
    std::vector<PairSample> samples;
    for (const std::string& path : paths) {
      std::vector<PairSample> s = task == "MNLI" ? read_mnli(path) : read_qqp(path);
      samples.insert(samples.end(), s.begin(), s.end());
    }
    d = pair_dataset(name, samples, tokenizer, seq_length);
  }
  std::string joined;
  for (const std::string& path : paths) joined += " " + path;
  log_info(" > ", task, " dataset for ", name, ":", joined, ": ", d.size(), " samples");
  return d;
}

}  // namespace

int run_finetune(int argc, char** argv) {
  CLI::App app{
      "Finetune a pretrained BERT on RACE, MNLI or QQP with tensor x pipeline x data "
      "parallelism (Megatron-LM's tasks/main.py)",
      "megatron finetune"};
  Args args;
  args.tokenizer_type = "BertWordPieceLowerCase";
  FinetuneFlags flags;
  ArgTable table(app);
  add_training_args(table, args);
  table.add("--task", flags.task,
            "RACE (multiple choice, 4 options), MNLI (3 classes) or QQP (2 classes)");
  table.add("--train-data", flags.train_data,
            "training files: RACE directories of *.txt articles (e.g. RACE/train/middle "
            "RACE/train/high), GLUE TSV files");
  table.add("--valid-data", flags.valid_data,
            "validation files, each scored on its own after every epoch (e.g. RACE/dev/middle "
            "RACE/dev/high, MNLI/dev_matched.tsv)");
  table.add("--pretrained-checkpoint", flags.pretrained_checkpoint,
            "checkpoint directory (as --load) of the pretrained BERT; its body is loaded, the "
            "task head starts fresh");
  table.add("--epochs", flags.epochs,
            "passes over the training data (0: only evaluate --valid-data)");
  add_bert_layernorm_flags(table, flags.layernorm);
  add_sharding_args(table, args);
  MegatronFlags megatron_flags(app);
  if (int rc = megatron_flags.parse(argc, argv); rc >= 0) return rc;
  select_training_device(args);

  std::shared_ptr<Communicator> world =
      make_world_communicator(args.distributed_backend, args.compute_device);
  // Every rank validates the same flags and reads the same files: a failure is reported once
  // and ends every rank (distributed/agreement.h).
  FinetuneStepConfig step;
  auto train = std::make_shared<FinetuneDataset>();
  std::vector<std::shared_ptr<const FinetuneDataset>> valid;
  int64_t iterations_per_epoch = 0;
  nlohmann::json tokenizer_id;
  run_on_all_ranks(*world, "", [&] {
    // Before the table's generic rejection, which speaks of pretraining's interleaved schedule.
    MT_REQUIRE(!megatron_flags.given("--num-layers-per-virtual-pipeline-stage"),
               "--num-layers-per-virtual-pipeline-stage: the interleaved schedule needs a "
               "multiple of --pipeline-model-parallel-size micro-batches per iteration, and "
               "finetune runs one per data-parallel rank (Megatron's finetuning); drop the flag "
               "(finetune's pipeline runs 1F1B)");
    check_megatron_flags(megatron_flags, args);
    MT_REQUIRE(flags.task == "RACE" || flags.task == "MNLI" || flags.task == "QQP",
               "--task must be RACE, MNLI or QQP, got '", flags.task, "'");
    MT_REQUIRE(flags.epochs >= 0, "finetune needs --epochs N (0: only evaluate --valid-data)");
    MT_REQUIRE(args.train_iters == 0 && args.train_samples == 0,
               "--train-iters / --train-samples do not apply to finetune: it trains --epochs "
               "passes over --train-data (Megatron's rule)");
    MT_REQUIRE(flags.epochs == 0 || !flags.train_data.empty(),
               "finetune needs --train-data (or --epochs 0 to only evaluate)");
    MT_REQUIRE(!flags.valid_data.empty(), "finetune needs --valid-data (one or more files)");
    MT_REQUIRE(args.data_path.empty() && args.train_data_path.empty() &&
                   args.valid_data_path.empty() && args.test_data_path.empty() && !args.mock_data,
               "--data-path / --*-data-path / --mock-data are pretraining data; finetune reads "
               "--train-data and --valid-data");
    const int model_parallel = args.tensor_model_parallel_size * args.pipeline_model_parallel_size;
    MT_REQUIRE(args.tensor_model_parallel_size > 0 && args.pipeline_model_parallel_size > 0 &&
                   world->size() % model_parallel == 0,
               "the world size ", world->size(),
               " is not a multiple of --tensor-model-parallel-size ",
               args.tensor_model_parallel_size, " x --pipeline-model-parallel-size ",
               args.pipeline_model_parallel_size);
    MT_REQUIRE(args.micro_batch_size > 0, "--micro-batch-size must be given and positive, got ",
               args.micro_batch_size);
    MT_REQUIRE(args.seq_length > 0, "--seq-length must be given and positive, got ",
               args.seq_length);
    check_bert_layernorm_flags(flags.layernorm);
    const int64_t dp = world->size() / model_parallel;
    // Megatron's finetuning: one micro-batch per data-parallel rank and iteration.
    MT_REQUIRE(args.global_batch_size == 0 || args.global_batch_size == args.micro_batch_size * dp,
               "--global-batch-size ", args.global_batch_size,
               ": finetune takes one micro-batch per data-parallel rank and iteration, so it is "
               "--micro-batch-size x data-parallel size (",
               args.micro_batch_size * dp, "); drop the flag");

    TokenizerOptions o{args.tokenizer_type,
                       args.vocab_file,
                       args.merge_file,
                       args.tokenizer_model,
                       args.vocab_size,
                       args.tiktoken_pattern,
                       args.tiktoken_num_special_tokens};
    std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(o);
    tokenizer_id = tokenizer_identity(o, *tokenizer);
    if (flags.epochs > 0) {
      *train =
          read_task_data(flags.task, "training", flags.train_data, *tokenizer, args.seq_length);
      iterations_per_epoch =
          finetune_iterations_per_epoch(train->size(), args.micro_batch_size, dp);
      MT_REQUIRE(iterations_per_epoch > 0, "--train-data has ", train->size(),
                 " samples: not one --micro-batch-size ", args.micro_batch_size,
                 " for each of the ", dp, " data-parallel ranks");
    } else {
      train->choices = flags.task == "RACE" ? kRaceChoices : 1;
    }
    for (const std::string& path : flags.valid_data)
      valid.push_back(std::make_shared<FinetuneDataset>(
          read_task_data(flags.task, finetune_dataset_name(flags.task, path), {path}, *tokenizer,
                         args.seq_length)));
    // Megatron: train_iters = epochs x iterations per epoch; --epochs 0 only evaluates.
    args.train_iters = flags.epochs > 0 ? flags.epochs * iterations_per_epoch : 1;
    if (flags.epochs == 0) args.skip_train = true;
    validate_training_args_except_data(args, world->size());
    if (args.log_args) log_line(table.format());

    step.model.bert =
        bert_config(args, flags.layernorm, /*binary_head=*/false, tokenizer->vocab_size());
    // Flags that contradict the shape (e.g. --sequence-parallel at TP 1) are reported here,
    // with the other flag errors, before any model is built.
    step.model.bert.validate(args.tensor_model_parallel_size);
    step.model.multiple_choice = flags.task == "RACE";
    step.model.head_name = step.model.multiple_choice ? "multichoice_head" : "classification_head";
    step.model.classes = flags.task == "RACE" ? kRaceChoices : flags.task == "MNLI" ? 3 : 2;
    MT_REQUIRE(args.ckpt_format != "torch",
               "finetune --ckpt-format torch is not supported: a finetuned BERT's task head has "
               "no name in Megatron-LM's checkpoints; leave --ckpt-format out (megatron-cpp's "
               "format)");
    step.pretrained_checkpoint = flags.pretrained_checkpoint;
    step.eval_micro_batch = args.micro_batch_size;
    log_info("building ", step.model.multiple_choice ? "multichoice" : "classification",
             " model for ", flags.task, " (", step.model.head_name, ": ", step.model.classes,
             step.model.multiple_choice ? " choices" : " classes", ")");
    if (flags.pretrained_checkpoint.empty())
      log_warning(
          "no --pretrained-checkpoint: finetuning starts from randomly initialised "
          "weights");
  });

  TrainerConfig config = trainer_config(args, table);
  config.tokenizer = tokenizer_id;
  set_muon_qkv_layout(config, step.model.bert);
  config.iterations_per_epoch = flags.epochs > 0 ? iterations_per_epoch : 1;
  Trainer trainer(std::move(config), world,
                  finetune_step_factory(std::move(step), train, std::move(valid)));
  // Non-zero when the rerun state machine ends the job (docs/reliability.md).
  const int exit_code = trainer.run().exit_code;
  if (exit_code == 0) log_info("done :-)");
  return exit_code;
}

}  // namespace megatron::cli
