// Args: Megatron's argument dump format, derived values, and the conversions to the training
// components' configs (Megatron's sample-counting rules), checked against hand-computed values.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

struct Parsed {
  CLI::App app;
  Args args;
  ArgTable table{app};
  explicit Parsed(std::vector<std::string> flags) {
    add_training_args(table, args);
    std::vector<char*> argv{const_cast<char*>("pretrain-gpt")};
    for (std::string& f : flags) argv.push_back(f.data());
    app.parse(int(argv.size()), argv.data());
  }
};

const std::vector<std::string> kBase = {"--num-layers",
                                        "2",
                                        "--hidden-size",
                                        "64",
                                        "--num-attention-heads",
                                        "4",
                                        "--seq-length",
                                        "32",
                                        "--micro-batch-size",
                                        "2",
                                        "--train-iters",
                                        "100",
                                        "--lr",
                                        "0.001",
                                        "--mock-data",
                                        "--vocab-size",
                                        "128"};

std::vector<std::string> with(std::vector<std::string> extra) {
  std::vector<std::string> v = kBase;
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

TEST(CliArgs, ArgumentDumpIsMegatrons) {
  Parsed p(kBase);
  validate_training_args(p.args, 4);
  const std::string dump = p.table.format();
  EXPECT_EQ(dump.rfind("------------------------ arguments ------------------------\n", 0), 0u);
  EXPECT_NE(dump.find("\n  hidden_size " + std::string(48 - 11, '.') + " 64\n"), std::string::npos);
  EXPECT_NE(dump.find("\n  save " + std::string(48 - 4, '.') + " None\n"), std::string::npos);
  EXPECT_NE(dump.find("\n  mock_data " + std::string(48 - 9, '.') + " True\n"), std::string::npos);
  // Sorted by name: adam_beta1 first, weight_decay last.
  EXPECT_LT(dump.find("  adam_beta1 "), dump.find("  hidden_size "));
  EXPECT_LT(dump.find("  hidden_size "), dump.find("  weight_decay "));
  EXPECT_NE(dump.find("-------------------- end of arguments ---------------------"),
            std::string::npos);
  EXPECT_EQ(p.table.to_json()["num_attention_heads"], 4);
  EXPECT_TRUE(p.table.to_json()["load"] == "");
}

TEST(CliArgs, DerivedValues) {
  Parsed p(with({"--tensor-model-parallel-size", "2"}));
  validate_training_args(p.args, 8);
  EXPECT_EQ(p.args.data_parallel_size, 4);
  EXPECT_EQ(p.args.global_batch_size, 8);  // micro 2 × DP 4
  EXPECT_EQ(p.args.max_position_embeddings, 32);
  EXPECT_EQ(p.args.num_micro_batches(), 1);
  EXPECT_EQ(p.args.effective_ffn_hidden_size(), 256);
}

TEST(CliArgs, LrScheduleCountsSamples) {
  Parsed p(with({"--global-batch-size", "16", "--lr-warmup-iters", "10", "--lr-decay-iters", "80",
                 "--min-lr", "0.0001", "--lr-decay-style", "cosine"}));
  validate_training_args(p.args, 2);
  const LrScheduleConfig c = lr_schedule_config(p.args);
  EXPECT_EQ(c.warmup_steps, 160);  // 10 iterations × 16
  EXPECT_EQ(c.decay_steps, 1280);  // 80 × 16
  EXPECT_EQ(c.style, LrDecayStyle::Cosine);
  EXPECT_DOUBLE_EQ(c.max_lr, 0.001);
  EXPECT_DOUBLE_EQ(c.min_lr, 0.0001);

  Parsed f(with({"--lr-warmup-fraction", "0.25"}));
  validate_training_args(f.args, 1);
  const LrScheduleConfig cf = lr_schedule_config(f.args);
  EXPECT_EQ(cf.decay_steps, 200);  // train iters 100 × global batch 2
  EXPECT_EQ(cf.warmup_steps, 50);  // 0.25 × 200
}

TEST(CliArgs, TrainSamplesGiveIterations) {
  std::vector<std::string> flags = kBase;
  flags.erase(flags.begin() + 10, flags.begin() + 12);  // drop --train-iters 100
  flags.insert(flags.end(), {"--train-samples", "1000", "--global-batch-size", "8",
                             "--lr-warmup-samples", "80"});
  Parsed p(flags);
  validate_training_args(p.args, 1);
  EXPECT_EQ(p.args.train_iters, 125);
  const LrScheduleConfig c = lr_schedule_config(p.args);
  EXPECT_EQ(c.decay_steps, 1000);
  EXPECT_EQ(c.warmup_steps, 80);

  // A schedule of one step: its batch of 4 (not micro-batch x DP, --global-batch-size's
  // implicit value) counts the steps, as in Megatron: 8 samples are 2 iterations.
  std::vector<std::string> scheduled = kBase;
  scheduled.erase(scheduled.begin() + 10, scheduled.begin() + 12);
  scheduled.insert(scheduled.end(), {"--train-samples", "8", "--step-batch-size-schedule", "0:4"});
  Parsed one_step(scheduled);
  validate_training_args(one_step.args, 1);
  EXPECT_EQ(one_step.args.train_iters, 2);
}

TEST(CliArgs, LossScalerConfig) {
  Parsed fp32(kBase);
  validate_training_args(fp32.args, 1);
  EXPECT_FALSE(grad_scaler_config(fp32.args).dynamic);
  EXPECT_EQ(grad_scaler_config(fp32.args).initial_scale, 1.0);

  Parsed fp16(with({"--fp16", "--loss-scale-window", "500"}));
  validate_training_args(fp16.args, 1);
  const GradScalerConfig d = grad_scaler_config(fp16.args);
  EXPECT_TRUE(d.dynamic);
  EXPECT_EQ(d.initial_scale, 4294967296.0);
  EXPECT_EQ(d.growth_interval, 500);
  EXPECT_EQ(d.hysteresis, 2);
  EXPECT_TRUE(adamw_config(fp16.args).f16_model_weights);

  Parsed fixed(with({"--fp16", "--loss-scale", "128"}));
  validate_training_args(fixed.args, 1);
  EXPECT_FALSE(grad_scaler_config(fixed.args).dynamic);
  EXPECT_EQ(grad_scaler_config(fixed.args).initial_scale, 128.0);
}

TEST(CliArgs, RulesNameTheFlags) {
  Parsed heads(with({"--tensor-model-parallel-size", "8"}));
  try {
    validate_training_args(heads.args, 8);
    FAIL() << "heads not divisible by TP accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--num-attention-heads 4 must be divisible by "
                               "--tensor-model-parallel-size 8"),
              std::string::npos)
        << e.message();
  }
  Parsed batch(with({"--global-batch-size", "6"}));
  EXPECT_THROW(validate_training_args(batch.args, 4), Error);  // 6 % (2 × 4) != 0
}

TEST(CliArgs, DistributedBackendFlag) {
  Parsed by_device(kBase);
  validate_training_args(by_device.args, 1);
  EXPECT_EQ(by_device.args.distributed_backend, "");  // chosen from the run's device
  for (const char* name : {"nccl", "mpi"}) {
    Parsed p(with({"--distributed-backend", name}));
    validate_training_args(p.args, 1);
    EXPECT_EQ(p.args.distributed_backend, name);
    EXPECT_EQ(p.table.to_json()["distributed_backend"], name);
  }
  Parsed bad(with({"--distributed-backend", "gloo"}));
  try {
    validate_training_args(bad.args, 1);
    FAIL() << "--distributed-backend gloo accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("--distributed-backend must be nccl or mpi, got 'gloo'"),
              std::string::npos)
        << e.message();
  }
}

}  // namespace
}  // namespace megatron::cli
