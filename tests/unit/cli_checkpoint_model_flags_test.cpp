// Megatron's flags on a command whose model is a checkpoint's (generate, eval): model flags are
// compared with the model built from the checkpoint, training flags have no effect, the rest
// keep the pretrain commands' rules. Expected values are the fixture's own numbers.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "cli/args/arg_table.h"
#include "cli/args/checkpoint_model_flags.h"
#include "cli/args/megatron_flags.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

using Strings = std::vector<std::string>;

// A GPT-2-shaped model: hidden 32, 4 heads (head dim 8), FFN left at 0 (= 4 · 32).
LanguageModelConfig tiny_model() {
  LanguageModelConfig c;
  c.num_layers = 2;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.max_position_embeddings = 32;
  c.layernorm_epsilon = 1e-5f;
  return c;
}

Strings mismatches(std::vector<GivenModelFlag> given) {
  return model_flag_mismatches(given, tiny_model());
}

TEST(CheckpointModelFlags, ValuesEqualToTheModelAgree) {
  EXPECT_EQ(mismatches({{"--num-layers", {"2"}},
                        {"--hidden-size", {"32"}},
                        {"--ffn-hidden-size", {"128"}},
                        {"--kv-channels", {"8"}},
                        {"--num-query-groups", {"4"}},
                        {"--norm-epsilon", {"1e-5"}},
                        {"--rotary-percent", {"1.0"}},
                        {"--normalization", {"LayerNorm"}},
                        {"--position-embedding-type", {"learned_absolute"}},
                        {"--seq-length", {"4096"}}}),  // not a model flag: ignored here
            Strings{});
}

TEST(CheckpointModelFlags, EachDifferenceIsNamedWithBothValues) {
  EXPECT_EQ(mismatches({{"--hidden-size", {"64"}},
                        {"--swiglu", {}},
                        {"--normalization", {"RMSNorm"}},
                        {"--norm-epsilon", {"1e-6"}}}),
            Strings({"--hidden-size 64 differs from the checkpoint's 32",
                     "--swiglu differs from the checkpoint's (--swiglu off)",
                     "--normalization RMSNorm differs from the checkpoint's LayerNorm",
                     "--norm-epsilon 1e-6 differs from the checkpoint's 1e-05"}));
  EXPECT_EQ(mismatches({{"--num-layers", {"two"}}}).size(), 1u);
}

TEST(CheckpointModelFlags, SwitchesFollowTheModel) {
  LanguageModelConfig c = tiny_model();
  c.arch.swiglu = true;
  c.arch.add_bias_linear = false;
  c.arch.untie_embeddings_and_output_weights = true;
  EXPECT_EQ(model_flag_mismatches({{"--swiglu", {}},
                                   {"--disable-bias-linear", {}},
                                   {"--untie-embeddings-and-output-weights", {}}},
                                  c),
            Strings{});
  EXPECT_TRUE(is_model_flag("--group-query-attention"));
  EXPECT_FALSE(is_model_flag("--lr"));
}

// generate's shape of command: its own flags, then Megatron's in the checkpoint-model context.
struct GenerateCommand {
  CLI::App app;
  std::string load;
  std::unique_ptr<MegatronFlags> megatron;
  GenerateCommand() {
    app.add_option("--load", load);
    megatron = std::make_unique<MegatronFlags>(app, FlagContext::kCheckpointModel);
  }
  int parse(Strings flags) {
    std::vector<char*> argv{const_cast<char*>("generate")};
    for (std::string& f : flags) argv.push_back(f.data());
    return parse_command_line(app, int(argv.size()), argv.data());
  }
  std::string check() {
    try {
      megatron->check();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST(CheckpointModelFlags, EveryMegatronFlagHasARule) {
  GenerateCommand c;  // the constructor stops on an unclassified flag
  const std::string table = c.megatron->table();
  EXPECT_NE(table.find("--hidden-size\tchecked against the checkpoint\t"), std::string::npos);
  EXPECT_NE(table.find("--lr\tno effect\ta training option"), std::string::npos);
  EXPECT_NE(table.find("--pipeline-model-parallel-size\tno effect if 1\t"), std::string::npos);
  EXPECT_NE(table.find("--num-experts\tchecked against the checkpoint\t"), std::string::npos);
  EXPECT_NE(table.find("--moe-aux-loss-coeff\tno effect\ta training option"), std::string::npos);
  EXPECT_NE(table.find("--inference-dynamic-batching-buffer-size-gb\tno effect\tconfigures "
                       "Megatron's inference engine"),
            std::string::npos);
}

TEST(CheckpointModelFlags, TrainingFlagsPassAndUnsupportedFeaturesStop) {
  GenerateCommand ok;
  ASSERT_EQ(ok.parse({"--lr", "1e-4", "--train-iters", "5", "--hidden-size", "64", "--swiglu",
                      "--pipeline-model-parallel-size", "1", "--enable-cuda-graph"}),
            -1);
  EXPECT_EQ(ok.check(), "");  // the model flags wait for the checkpoint
  GenerateCommand pp;
  ASSERT_EQ(pp.parse({"--pipeline-model-parallel-size", "2"}), -1);
  EXPECT_NE(pp.check().find("--pipeline-model-parallel-size 2: generation runs on "
                            "tensor-parallel ranks only"),
            std::string::npos);
  GenerateCommand fp16;
  ASSERT_EQ(fp16.parse({"--fp16"}), -1);
  EXPECT_NE(fp16.check().find("--fp16: generation computes in fp32"), std::string::npos);
}

TEST(CheckpointModelFlags, CheckModelFlagsStopsOrDefersToTheCheckpoint) {
  GenerateCommand c;
  ASSERT_EQ(c.parse({"--hidden-size", "64", "--num-layers", "2"}), -1);
  try {
    c.megatron->check_model_flags(tiny_model(), false, "/ckpt");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--hidden-size 64 differs from the checkpoint's 32 in /ckpt"),
              std::string::npos);
    EXPECT_NE(what.find("--use-checkpoint-args"), std::string::npos);
    EXPECT_EQ(what.find("--num-layers"), std::string::npos);
  }
  EXPECT_NO_THROW(c.megatron->check_model_flags(tiny_model(), true, "/ckpt"));
}

}  // namespace
}  // namespace megatron::cli
