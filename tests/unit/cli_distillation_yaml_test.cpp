// --export-kd-cfg (cli/args/distillation_yaml.h): Megatron's distillation config YAML — the CI
// configs' file as `yq -P` writes it, the defaults, and a clear error naming the key for each
// kind of bad file.
#include <gtest/gtest.h>

#include <string>

#include "cli/args/distillation_yaml.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

// The message of the Error parsing `text` throws ("" when it parses).
std::string error_of(const std::string& text) {
  try {
    parse_distillation_config(text, "cfg.yaml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DistillationYaml, ReadsTheCiConfig) {
  // tests/functional_tests/test_cases/gpt/gpt3_mcore_te_tp2_pp1_modelopt_distill_resume_1node's
  // DISTILL_CONFIG through `yq -P`.
  const DistillationConfig c = parse_distillation_config(
      "intermediate_layer_pairs:\n"
      "  - - decoder.final_layernorm\n"
      "    - decoder.final_layernorm\n"
      "logit_layers:\n"
      "  - output_layer\n"
      "  - output_layer\n"
      "skip_lm_loss: true\n"
      "kd_loss_scale: 10.0\n",
      "cfg.yaml");
  ASSERT_EQ(c.intermediate_layer_pairs.size(), 1u);
  EXPECT_EQ(c.intermediate_layer_pairs[0].first, "decoder.final_layernorm");
  EXPECT_EQ(c.logit_layers.second, "output_layer");
  EXPECT_TRUE(c.skip_lm_loss);
  EXPECT_EQ(c.kd_loss_scale, 10.0);
  EXPECT_EQ(c.logit_kl_temperature, 1.0);
}

TEST(DistillationYaml, FlowStyleAndDefaults) {
  DistillationConfig c = parse_distillation_config(
      "{skip_lm_loss: false, logit_kl_temperature: 2.5, intermediate_layer_pairs: []}", "x");
  EXPECT_FALSE(c.skip_lm_loss);
  EXPECT_EQ(c.logit_kl_temperature, 2.5);
  EXPECT_TRUE(c.intermediate_layer_pairs.empty());
  c = parse_distillation_config("", "x");  // an empty file: Megatron's defaults
  EXPECT_TRUE(c.skip_lm_loss);
  EXPECT_EQ(c.kd_loss_scale, 1.0);
  EXPECT_TRUE(c.intermediate_layer_pairs.empty());
}

TEST(DistillationYaml, BadFilesNameTheKey) {
  EXPECT_NE(error_of("skip_lm_loss: [true").find("cfg.yaml is not valid YAML"), std::string::npos);
  EXPECT_NE(error_of("- a\n- b\n").find("must be a mapping of keys"), std::string::npos);
  EXPECT_NE(error_of("kd_loss_scal: 1.0").find("unknown key 'kd_loss_scal'"), std::string::npos);
  EXPECT_NE(error_of("kd_loss_scale: lots").find("key 'kd_loss_scale' must be a number"),
            std::string::npos);
  EXPECT_NE(error_of("skip_lm_loss: maybe").find("key 'skip_lm_loss' must be true or false"),
            std::string::npos);
  EXPECT_NE(error_of("logit_kl_temperature: 0").find("logit_kl_temperature must be positive"),
            std::string::npos);
  EXPECT_NE(error_of("logit_layers: [output_layer]").find("logit_layers must be a [student, "),
            std::string::npos);
  EXPECT_NE(error_of("intermediate_layer_pairs: [[decoder.layers.0, decoder.final_layernorm]]")
                .find("intermediate_layer_pairs[0] names module 'decoder.layers.0' of the "
                      "student: only 'decoder.final_layernorm'"),
            std::string::npos);
  EXPECT_NE(
      error_of("intermediate_layer_pairs: [[decoder.final_layernorm, decoder.final_layernorm, "
               "mse]]")
          .find("a third entry, a loss function name, is not supported"),
      std::string::npos);
}

TEST(DistillationYaml, MissingFileNamesTheFlag) {
  try {
    read_distillation_config("/nonexistent/kd.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--export-kd-cfg /nonexistent/kd.yaml cannot be read"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace megatron::cli
