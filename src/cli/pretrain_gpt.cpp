// `megatron pretrain-gpt` — Megatron-LM's pretrain_gpt.py: parse and validate the flags,
// print them, build the tokenizer and datasets (or --mock-data), then run the Trainer.
#include <CLI/CLI.hpp>

#include "cli/args.h"
#include "cli/subcommands.h"
#include "core/logging.h"
#include "data/gpt_datasets_factory.h"
#include "data/mock_gpt_dataset.h"
#include "data/tokenizer.h"
#include "dist/runtime.h"
#include "model/gpt_model.h"
#include "train/trainer.h"

namespace megatron::cli {

namespace {

struct Vocabulary {
  int64_t size = 0;
  int32_t eod = -1;
};

Vocabulary build_vocabulary(const Args& a) {
  if (a.tokenizer_type.empty()) return {a.vocab_size, -1};  // --mock-data --vocab-size V
  TokenizerOptions o{a.tokenizer_type, a.vocab_file, a.merge_file, a.tokenizer_model, a.vocab_size};
  std::unique_ptr<Tokenizer> tokenizer = make_tokenizer(o);
  return {tokenizer->vocab_size(), tokenizer->eod()};
}

GptDatasets build_datasets(const Args& a, const Vocabulary& vocab) {
  const int64_t gb = a.global_batch_size;
  const int64_t train = a.train_iters * gb;
  const int64_t valid = (a.train_iters / a.eval_interval + 1) * a.eval_iters * gb;
  const int64_t test = a.eval_iters * gb;
  if (a.mock_data) {
    // Distinct seeds give the validation set other samples than the training set.
    return {std::make_shared<MockGptDataset>(train, a.seq_length, vocab.size, a.seed),
            valid > 0
                ? std::make_shared<MockGptDataset>(valid, a.seq_length, vocab.size, a.seed + 1)
                : nullptr,
            nullptr};
  }
  return build_gpt_datasets(a.data_path, a.split, a.seq_length, a.seed, {train, valid, test});
}

GptConfig gpt_config(const Args& a, const Vocabulary& vocab) {
  GptConfig c;
  c.num_layers = a.num_layers;
  c.hidden_size = a.hidden_size;
  c.num_attention_heads = a.num_attention_heads;
  c.ffn_hidden_size = a.effective_ffn_hidden_size();
  c.vocab_size = vocab.size;
  c.padded_vocab_size =
      padded_vocab_size(vocab.size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size);
  c.max_position_embeddings = a.max_position_embeddings;
  c.seq_length = a.seq_length;
  c.hidden_dropout = float(a.hidden_dropout);
  c.attention_dropout = float(a.attention_dropout);
  c.init_method_std = float(a.init_method_std);
  c.layernorm_epsilon = float(a.layernorm_epsilon);
  c.recompute_activations = a.full_recompute();
  c.compute_dtype = a.bf16 ? DType::BF16 : DType::F32;
  return c;
}

}  // namespace

int run_pretrain_gpt(int argc, char** argv) {
  CLI::App app{"Pretrain a GPT model with tensor x data parallelism (Megatron-LM flags)",
               "megatron pretrain-gpt"};
  Args args;
  bool eod_mask_loss = false;
  ArgTable table(app);
  add_training_args(table, args);
  table.add_flag("--eod-mask-loss", eod_mask_loss, "mask the loss of end-of-document labels");
  if (int rc = parse_command_line(app, argc, argv); rc >= 0) return rc;

  std::shared_ptr<Communicator> world = world_communicator();
  validate_training_args(args, world->size());
  log_line(table.format());

  const Vocabulary vocab = build_vocabulary(args);
  MT_CHECK(vocab.size > 0, "the vocabulary is empty: give --vocab-size or a tokenizer");
  MT_CHECK(!eod_mask_loss || vocab.eod >= 0,
           "--eod-mask-loss needs a tokenizer with an end-of-document token (--tokenizer-type)");
  TrainerConfig cfg;
  cfg.model = gpt_config(args, vocab);
  log_info(" > padded vocab (size: ", vocab.size, ") with ",
           cfg.model.padded_vocab_size - vocab.size,
           " dummy tokens (new size: ", cfg.model.padded_vocab_size, ")");
  GptDatasets data = build_datasets(args, vocab);

  cfg.tensor_parallel = args.tensor_model_parallel_size;
  cfg.micro_batch = args.micro_batch_size;
  cfg.global_batch = args.global_batch_size;
  cfg.train_iters = args.train_iters;
  cfg.exit_interval = args.exit_interval;
  cfg.seed = args.seed;
  cfg.fp16 = args.fp16;
  cfg.lr = lr_schedule_config(args);
  cfg.adam = adamw_config(args);
  cfg.clip_grad = args.clip_grad;
  cfg.scaler = grad_scaler_config(args);
  cfg.log_interval = args.log_interval;
  cfg.eval_interval = args.eval_interval;
  cfg.eval_iters = args.eval_iters;
  cfg.metrics_file = args.metrics_file;
  cfg.tensorboard_dir = args.tensorboard_dir;
  cfg.save = args.save;
  cfg.load = args.load;
  cfg.save_interval = args.save_interval;
  cfg.no_load_optim = args.no_load_optim;
  cfg.no_load_rng = args.no_load_rng;
  cfg.finetune = args.finetune;
  cfg.eod_token = vocab.eod;
  cfg.eod_mask_loss = eod_mask_loss;
  cfg.args = table.to_json();

  Trainer trainer(std::move(cfg), world, data.train, data.valid);
  trainer.run();
  return 0;
}

}  // namespace megatron::cli
