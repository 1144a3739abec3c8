// `megatron pretrain-bert` — Megatron-LM's pretrain_bert.py: parse and validate the flags,
// print them, build the WordPiece tokenizer and the sentence-level BERT datasets, then run
// the Trainer with the BERT model step (logs `lm loss` and `sop loss`).
#include <CLI/CLI.hpp>

#include "checkpoint/megatron_lm_torch.h"
#include "checkpoint/megatron_lm_torch_dist.h"
#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/megatron_flags.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "cli/setup/bert_setup.h"
#include "cli/setup/gpt_setup.h"
#include "cli/setup/megatron_lm_load.h"
#include "cli/setup/megatron_lm_save.h"
#include "cli/setup/theoretical_memory.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "data/bert_datasets_factory.h"
#include "data/bert_masking.h"
#include "data/tokenizers/make_tokenizer.h"
#include "data/tokenizers/tokenizer_identity.h"
#include "distributed/agreement.h"
#include "distributed/backend.h"
#include "distributed/runtime.h"
#include "train/bert_step.h"
#include "train/trainer.h"

namespace megatron::cli {

namespace {

struct BertFlags {
  double mask_prob = 0.15;
  double short_seq_prob = 0.1;
  bool no_binary_head = false;
  BertLayerNormFlags layernorm;
};

}  // namespace

int run_pretrain_bert(int argc, char** argv) {
  CLI::App app{
      "Pretrain a BERT model with tensor x pipeline x data parallelism (Megatron-LM flags)",
      "megatron pretrain-bert"};
  Args args;
  args.seq_length = 512;  // pretrain_bert.py's default
  args.tokenizer_type = "BertWordPieceLowerCase";
  BertFlags flags;
  ArgTable table(app);
  add_training_args(table, args);
  table.add("--mask-prob", flags.mask_prob, "probability of masking a token (whole words)");
  table.add("--short-seq-prob", flags.short_seq_prob,
            "probability of a sample shorter than --seq-length");
  table.add_flag("--bert-no-binary-head", flags.no_binary_head,
                 "no pooler and no sentence-order-prediction head/loss");
  add_bert_layernorm_flags(table, flags.layernorm);
  add_sharding_args(table, args);
  table.add_flag("--use-checkpoint-args", args.arch.use_checkpoint_args,
                 "take the model shape (--num-layers, --hidden-size, --num-attention-heads, "
                 "--ffn-hidden-size, --max-position-embeddings) from the checkpoint in --load");
  add_pipeline_args(table, args);
  MegatronFlags megatron_flags(app);
  if (int rc = megatron_flags.parse(argc, argv); rc >= 0) return rc;
  select_training_device(args);

  std::shared_ptr<Communicator> world =
      make_world_communicator(args.distributed_backend, args.compute_device);
  // Every rank validates the same flags and opens the same files: a failure is reported once,
  // by the lowest failing rank, and ends every rank (distributed/agreement.h).
  BertStepConfig model;
  BertDatasets data;
  nlohmann::json tokenizer_id;
  // A Megatron-LM checkpoint in --load is converted by rank 0 before any rank reads it; its args
  // do not record the real vocabulary (BERT's tokenizers are read from --vocab-file): the
  // tokenizer's is used.
  run_on_all_ranks(*world, "", [&] {
    if (args.load.empty() || !(is_megatron_lm_torch_checkpoint(args.load) ||
                               is_megatron_lm_torch_dist_checkpoint(args.load)))
      return;
    const int64_t vocab =
        make_tokenizer({args.tokenizer_type, args.vocab_file, args.merge_file, args.tokenizer_model,
                        args.vocab_size, args.tiktoken_pattern, args.tiktoken_num_special_tokens})
            ->vocab_size();
    use_megatron_lm_load(args, world->rank() == 0, MegatronLmFamily::kBert, vocab);
  });
  run_on_all_ranks(*world, "", [&] {
    apply_checkpoint_args(args, CheckpointArgs::kShape);
    check_megatron_flags(megatron_flags, args);
    validate_training_args(args, world->size());
    MT_REQUIRE(!args.mock_data, "--mock-data is not supported by pretrain-bert: give --data-path");
    MT_REQUIRE(
        args.train_data_path.empty() && args.valid_data_path.empty() && args.test_data_path.empty(),
        "--train-data-path / --valid-data-path / --test-data-path are not supported by "
        "pretrain-bert yet: give --data-path with --split");
    MT_REQUIRE(!args.data_path.empty(),
               "pretrain-bert needs --data-path (a sentence-level prefix "
               "from `megatron preprocess --split-sentences`)");
    MT_REQUIRE(flags.mask_prob > 0 && flags.mask_prob < 1, "--mask-prob must be in (0, 1), got ",
               flags.mask_prob);
    MT_REQUIRE(flags.short_seq_prob >= 0 && flags.short_seq_prob <= 1,
               "--short-seq-prob must be in [0, 1], got ", flags.short_seq_prob);
    check_bert_layernorm_flags(flags.layernorm);
    if (args.log_args) log_line(table.format());

    TokenizerOptions o{args.tokenizer_type,
                       args.vocab_file,
                       args.merge_file,
                       args.tokenizer_model,
                       args.vocab_size,
                       args.tiktoken_pattern,
                       args.tiktoken_num_special_tokens};
    std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(o);
    MT_REQUIRE(tokenizer->cls() >= 0 && tokenizer->sep() >= 0 && tokenizer->mask() >= 0 &&
                   tokenizer->pad() >= 0,
               "--tokenizer-type ", args.tokenizer_type,
               " has no [CLS]/[SEP]/[MASK]/[PAD] tokens; BERT needs BertWordPieceLowerCase or "
               "BertWordPieceCase");

    model.model =
        bert_config(args, flags.layernorm, !flags.no_binary_head, tokenizer->vocab_size());
    // Flags that contradict the shape (e.g. --sequence-parallel at TP 1) are reported here,
    // with the other flag errors, before any model is built.
    model.model.validate(args.tensor_model_parallel_size);
    model.split = pipeline_split(args);
    model.microbatch_group = args.microbatch_group_size_per_virtual_pipeline_stage.value_or(0);
    log_info(" > padded vocab (size: ", tokenizer->vocab_size(), ") with ",
             model.model.padded_vocab_size - tokenizer->vocab_size(),
             " dummy tokens (new size: ", model.model.padded_vocab_size, ")");

    BertDatasetOptions d;
    d.max_seq_length = args.seq_length;
    d.short_seq_prob = flags.short_seq_prob;
    d.mask_prob = flags.mask_prob;
    d.seed = args.seed;
    d.cls = tokenizer->cls();
    d.sep = tokenizer->sep();
    d.mask = tokenizer->mask();
    d.pad = tokenizer->pad();
    d.vocab_size = tokenizer->vocab_size();
    d.word_start = word_starts_from_vocab_file(args.vocab_file);
    const int64_t train = args.train_iters * args.global_batch_size;
    const int64_t eval_gb = args.eval_global_batch();
    const int64_t valid = (args.train_iters / args.eval_interval + 1) * args.eval_iters * eval_gb;
    data = build_bert_datasets(args.data_path, args.split, d,
                               {train, valid, args.eval_iters * eval_gb});
    tokenizer_id = tokenizer_identity(o, *tokenizer);
  });

  TrainerConfig config = trainer_config(args, table);
  run_on_all_ranks(*world, "", [&] { use_megatron_lm_save(config, args, model.model); });
  config.tokenizer = tokenizer_id;
  set_muon_qkv_layout(config, model.model);
  config.theoretical_memory_report = theoretical_memory_report(
      plan_model_of(model.model, args, flags.mask_prob), plan_layout_of(args, model.split));
  Trainer trainer(std::move(config), world,
                  bert_step_factory(std::move(model), data.train, data.valid, data.test));
  // Non-zero when the rerun state machine ends the job (docs/reliability.md).
  return trainer.run().exit_code;
}

}  // namespace megatron::cli
