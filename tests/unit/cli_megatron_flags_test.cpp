// Megatron-LM compatibility of the command line: argparse's last-occurrence rule for repeated
// flags, and the treatment of every Megatron flag that is not implemented (accepted without
// effect, or rejected by name). The flag list itself comes from Megatron's parser
// (tools/reference/megatron_flags.py); its spot checks below are facts read in Megatron's
// arguments.py, not outputs of this code.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/last_flag_wins.h"
#include "cli/args/megatron_flags.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

using Strings = std::vector<std::string>;

// A pretrain-gpt command line: the shared flags, then every Megatron flag.
struct Command {
  CLI::App app;
  Args args;
  ArgTable table{app};
  std::unique_ptr<MegatronFlags> megatron;
  Command() {
    add_training_args(table, args);
    megatron = std::make_unique<MegatronFlags>(app);
  }
  // parse_command_line's result: -1 when parsing succeeded.
  int parse(Strings flags) {
    std::vector<char*> argv{const_cast<char*>("pretrain-gpt")};
    for (std::string& f : flags) argv.push_back(f.data());
    return parse_command_line(app, int(argv.size()), argv.data());
  }
};

std::string check_error(Command& c) {
  try {
    check_megatron_flags(*c.megatron, c.args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(LastFlagWins, RepeatedOptionsKeepTheirLastOccurrence) {
  Command c;
  ASSERT_EQ(c.parse({"--weight-decay", "0.1", "--clip-grad", "1.0", "--weight-decay", "0.01",
                     "--data-path", "a", "b", "--clip-grad=0.5", "--data-path", "c", "--min-lr",
                     "-1e-5", "--min-lr", "2e-5"}),
            -1);
  EXPECT_EQ(c.args.weight_decay, 0.01);
  EXPECT_EQ(c.args.clip_grad, 0.5);
  EXPECT_EQ(c.args.data_path, Strings({"c"}));  // a repeated list is replaced, not extended
  EXPECT_EQ(c.args.min_lr, 2e-5);
}

TEST(LastFlagWins, AFlagAndItsNegationAreOneOption) {
  Command on;
  ASSERT_EQ(on.parse({"--no-check-for-nan-in-loss-and-grad", "--check-for-nan-in-loss-and-grad"}),
            -1);
  EXPECT_TRUE(on.args.check_for_nan_in_loss_and_grad);
  Command off;
  ASSERT_EQ(off.parse({"--check-for-nan-in-loss-and-grad", "--no-check-for-nan-in-loss-and-grad"}),
            -1);
  EXPECT_FALSE(off.args.check_for_nan_in_loss_and_grad);
}

TEST(LastFlagWins, TokensAreDroppedWithTheirValuesOnly) {
  Command c;
  // A negative number is a value; unknown tokens and everything after "--" are left alone.
  EXPECT_EQ(keep_last_occurrences(c.app, {"--seed", "1", "--bogus", "--lr", "-3", "--seed", "2",
                                          "--", "--seed", "3"}),
            Strings({"--bogus", "--lr", "-3", "--seed", "2", "--", "--seed", "3"}));
  EXPECT_EQ(keep_last_occurrences(
                c.app, {"--data-path", "x", "y", "--fp16", "--data-path", "z", "--fp16"}),
            Strings({"--data-path", "z", "--fp16"}));
  // A Megatron list flag (nargs='+') and a fixed-arity one (--rampup-batch-size takes 3).
  EXPECT_EQ(keep_last_occurrences(c.app, {"--rampup-batch-size", "1", "2", "3", "--fp16",
                                          "--rampup-batch-size", "4", "5", "6"}),
            Strings({"--fp16", "--rampup-batch-size", "4", "5", "6"}));
}

TEST(LastFlagWins, RepeatableOptionsKeepEveryOccurrence) {
  // argparse's action="append" (generate's --prompt, --stop-token): every occurrence counts.
  CLI::App app;
  Strings prompts;
  std::vector<int64_t> stops;
  int seed = 0;
  repeatable(app.add_option("--prompt", prompts));
  repeatable(app.add_option("--stop-token", stops));
  app.add_option("--seed", seed);
  Strings flags = {"--prompt", "a b", "--seed",       "1",  "--stop-token", "32",
                   "--prompt", "-1",  "--stop-token", "-1", "--seed",       "2"};
  std::vector<char*> argv{const_cast<char*>("generate")};
  for (std::string& f : flags) argv.push_back(f.data());
  ASSERT_EQ(parse_command_line(app, int(argv.size()), argv.data()), -1);
  EXPECT_EQ(prompts, Strings({"a b", "-1"}));
  EXPECT_EQ(stops, std::vector<int64_t>({32, -1}));
  EXPECT_EQ(seed, 2);  // a plain option: the last still wins
}

TEST(LastFlagWins, UnknownFlagsAreStillErrors) {
  Command c;
  EXPECT_NE(c.parse({"--no-such-flag", "1"}), -1);
}

TEST(MegatronFlags, TheListIsMegatronsParser) {
  // Spot checks against Megatron-LM's arguments.py: name and number of values.
  auto arity = [](const std::string& name) {
    for (const MegatronFlag& f : megatron_flag_list())
      if (f.name == name) return f.arity;
    return -100;
  };
  EXPECT_EQ(arity("--attention-backend"), 1);
  EXPECT_EQ(arity("--fp16"), 0);
  EXPECT_EQ(arity("--data-path"), kMegatronList);
  EXPECT_EQ(arity("--rampup-batch-size"), 3);
  EXPECT_EQ(arity("--step-batch-size-schedule"), 1);
  EXPECT_EQ(arity("--persistent-save-interval"), 1);  // an alias of --save-interval
  EXPECT_EQ(arity("--help"), -100);                   // not a Megatron setting
  EXPECT_GT(megatron_flag_list().size(), 800u);
}

TEST(MegatronFlags, EveryFlagIsImplementedOrClassified) {
  Command c;  // MegatronFlags' constructor stops on an unclassified flag
  const std::string table = c.megatron->table();
  size_t lines = 0;
  for (size_t pos = 0; (pos = table.find('\n', pos)) != std::string::npos; ++pos) ++lines;
  EXPECT_EQ(lines, megatron_flag_list().size());
  EXPECT_NE(table.find("--hidden-size\tsupported\t"), std::string::npos);
  EXPECT_NE(table.find("--transformer-impl\tno effect\t"), std::string::npos);
  EXPECT_NE(table.find("--use-flash-attn\tsupported\t"), std::string::npos);
  EXPECT_NE(table.find("--num-experts\trejected\tmixture of experts is implemented by "
                       "pretrain-gpt (docs/moe.md); this command does not take it\n"),
            std::string::npos);
  EXPECT_NE(table.find("--context-parallel-size\tno effect if 1\t"), std::string::npos);
}

TEST(MegatronFlags, GpuImplementationFlagsAreAcceptedWithoutEffect) {
  Command c;
  ASSERT_EQ(c.parse({"--flash-attention-version", "3", "--transformer-impl", "local",
                     "--no-masked-softmax-fusion", "--no-bias-gelu-fusion", "--use-mcore-models",
                     "--attention-softmax-in-fp32", "--num-workers", "2", "--dataloader-type",
                     "single", "--manual-gc", "--context-parallel-size", "1"}),
            -1);
  EXPECT_EQ(check_error(c), "");
}

TEST(MegatronFlags, RejectedFlagsNameTheFlagAndTheReason) {
  Command moe;
  ASSERT_EQ(moe.parse({"--num-experts", "8"}), -1);
  EXPECT_EQ(check_error(moe),
            "--num-experts 8: mixture of experts is implemented by pretrain-gpt (docs/moe.md); "
            "this command does not take it");
  Command cp;
  ASSERT_EQ(cp.parse({"--context-parallel-size", "2"}), -1);
  EXPECT_EQ(check_error(cp),
            "--context-parallel-size 2: context parallelism is implemented for pretrain-gpt only "
            "(causal attention) (only 1 is accepted)");
  Command cyclic;
  ASSERT_EQ(cyclic.parse({"--dataloader-type", "cyclic"}), -1);
  EXPECT_NE(check_error(cyclic).find("--dataloader-type cyclic: "), std::string::npos);
}

TEST(MegatronFlags, StepBatchSizeScheduleConflictsWithGlobalBatchSize) {
  Command both;  // Megatron's GPT-3 example gives both, and Megatron stops on it
  ASSERT_EQ(
      both.parse({"--global-batch-size", "1536", "--step-batch-size-schedule", "0:16 2.4B:320"}),
      -1);
  EXPECT_EQ(check_error(both).rfind("Cannot specify both --step-batch-size-schedule and "
                                    "--global-batch-size",
                                    0),
            0u);
}

TEST(MegatronFlags, StepBatchSizeScheduleIsImplementedAndRampupHasNoEffect) {
  Command c;  // Megatron's current main ignores --rampup-batch-size (a deprecation warning)
  ASSERT_EQ(c.parse({"--step-batch-size-schedule", "0:16 2.4B:320", "--rampup-batch-size", "16",
                     "8", "300000"}),
            -1);
  EXPECT_EQ(check_error(c), "");
  EXPECT_EQ(c.args.step_batch_size_schedule, "0:16 2.4B:320");
  const std::string table = c.megatron->table();
  EXPECT_NE(table.find("--step-batch-size-schedule\tsupported\t"), std::string::npos);
  EXPECT_NE(table.find("--rampup-batch-size\tno effect\t"), std::string::npos);
}

}  // namespace
}  // namespace megatron::cli
