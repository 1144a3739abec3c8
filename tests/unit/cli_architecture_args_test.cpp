// The Llama-family architecture flags (Megatron-Core names): parsed into ArchitectureOptions,
// printed and stored like every flag, read back from stored arguments (checkpoints) into the
// same options, and bad values named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include "checkpoint/architecture_json.h"
#include "cli/args/arg_table.h"
#include "cli/args/args.h"
#include "cli/args/training_config.h"
#include "cli/args/training_flags.h"
#include "core/error.h"

namespace megatron::cli {
namespace {

using ::testing::HasSubstr;

struct Parsed {
  CLI::App app;
  ArchitectureArgs arch;
  ArgTable table{app};
  explicit Parsed(std::vector<std::string> flags) {
    add_architecture_args(table, arch);
    std::vector<char*> argv{const_cast<char*>("pretrain-gpt")};
    for (std::string& f : flags) argv.push_back(f.data());
    app.parse(int(argv.size()), argv.data());
  }
};

TEST(CliArchitectureArgs, LlamaFlagsGiveTheOptionsAndSurviveTheStoredArguments) {
  Parsed p({"--position-embedding-type",
            "rope",
            "--rotary-base",
            "500000",
            "--rotary-percent",
            "0.5",
            "--rotary-seq-len-interpolation-factor",
            "4",
            "--normalization",
            "RMSNorm",
            "--norm-epsilon",
            "1e-6",
            "--swiglu",
            "--group-query-attention",
            "--num-query-groups",
            "2",
            "--kv-channels",
            "32",
            "--disable-bias-linear",
            "--add-qkv-bias",
            "--untie-embeddings-and-output-weights"});
  const ArchitectureOptions o = architecture_options(p.arch);
  EXPECT_EQ(o.position_embedding, PositionEmbedding::kRope);
  EXPECT_EQ(o.rotary_base, 500000.0f);
  EXPECT_EQ(o.rotary_percent, 0.5f);
  EXPECT_EQ(o.rotary_seq_len_interpolation_factor, 4.0f);
  EXPECT_EQ(o.normalization, Normalization::kRMSNorm);
  EXPECT_TRUE(o.swiglu);
  EXPECT_EQ(o.num_query_groups, 2);
  EXPECT_EQ(o.kv_channels, 32);
  EXPECT_FALSE(o.add_bias_linear);
  EXPECT_TRUE(o.add_qkv_bias);
  EXPECT_TRUE(o.untie_embeddings_and_output_weights);
  EXPECT_EQ(norm_epsilon(p.arch, 1e-5), 1e-6f);
  EXPECT_THAT(p.table.format(), HasSubstr("num_query_groups ......"));

  // A checkpoint stores the table's JSON; reading it back gives the same options.
  const nlohmann::json stored = p.table.to_json();
  const ArchitectureOptions back = architecture_from_args_json(stored);
  EXPECT_EQ(architecture_args_json(back), architecture_args_json(o));
  EXPECT_EQ(norm_epsilon_from_args_json(stored), 1e-6f);
}

// YaRN's flags (kernels/yarn_rope.h) reach the options and survive the stored arguments (the
// table's and the architecture record's), so --load, generate and convert rebuild the same
// frequencies and factors; a record without them (an older checkpoint) reads as no extension.
TEST(CliArchitectureArgs, YarnFlagsSurviveTheStoredArguments) {
  Parsed p({"--position-embedding-type", "yarn", "--rotary-scaling-factor", "16", "--mscale", "0.9",
            "--mscale-all-dim", "0.5", "--yarn-original-max-position-embeddings", "2048",
            "--yarn-beta-fast", "24", "--yarn-beta-slow", "2",
            "--no-yarn-correction-range-round-to-int"});
  const ArchitectureOptions o = architecture_options(p.arch);
  EXPECT_EQ(o.position_embedding, PositionEmbedding::kYarn);
  const kernels::YarnRopeScaling expected{.factor = 16.0f,
                                          .original_max_position_embeddings = 2048.0f,
                                          .beta_fast = 24.0f,
                                          .beta_slow = 2.0f,
                                          .mscale = 0.9f,
                                          .mscale_all_dim = 0.5f,
                                          .round_to_int = false};
  EXPECT_EQ(o.yarn, expected);
  for (const nlohmann::json& stored : {p.table.to_json(), architecture_args_json(o)}) {
    const ArchitectureOptions back = architecture_from_args_json(stored);
    EXPECT_EQ(back.position_embedding, PositionEmbedding::kYarn);
    EXPECT_EQ(back.yarn, expected);
  }
  const ArchitectureOptions old = architecture_from_args_json(
      nlohmann::json{{"position_embedding_type", "rope"}, {"multi_latent_attention", true}});
  EXPECT_EQ(old.yarn, kernels::YarnRopeScaling{});
  EXPECT_TRUE(old.mla.yarn);  // MLA's default rope type

  // MLA with YaRN at factor 40 (the DeepSeek-V3 proxies' flags) keeps them too.
  Parsed mla({"--multi-latent-attention", "--rotary-scaling-factor", "40", "--mscale", "1.0",
              "--mscale-all-dim", "1.0"});
  const ArchitectureOptions m = architecture_from_args_json(mla.table.to_json());
  EXPECT_TRUE(m.mla.enabled && m.mla.yarn);
  EXPECT_EQ(m.yarn.factor, 40.0f);
  EXPECT_EQ(m.yarn.mscale_all_dim, 1.0f);
}

// --use-mup and its options survive the stored arguments, so generate and convert rebuild the
// same attention scale and multipliers; an unset base width stays unset (multiplier 1).
TEST(CliArchitectureArgs, MupFlagsSurviveTheStoredArguments) {
  Parsed p({"--use-mup", "--mup-base-hidden-size", "256", "--mup-embedding-mult", "3",
            "--mup-output-mult", "0.25", "--mup-base-head-dim", "64", "--mup-attn-scale-power",
            "0.75"});
  const ArchitectureOptions o = architecture_options(p.arch);
  EXPECT_TRUE(o.mup.enabled);
  EXPECT_EQ(o.mup.base_hidden_size, 256);
  EXPECT_EQ(o.mup.embedding_mult, 3.0f);
  EXPECT_EQ(o.mup.output_mult, 0.25f);
  EXPECT_EQ(o.mup.base_head_dim, 64.0);
  EXPECT_EQ(o.mup.attn_scale_power, 0.75);
  const ArchitectureOptions back = architecture_from_args_json(p.table.to_json());
  EXPECT_EQ(architecture_args_json(back), architecture_args_json(o));
  EXPECT_EQ(mup_width_mult(back.mup, 512), 2.0);

  Parsed defaults({"--use-mup"});
  const ArchitectureOptions d = architecture_from_args_json(defaults.table.to_json());
  EXPECT_TRUE(d.mup.enabled);
  EXPECT_EQ(mup_width_mult(d.mup, 512), 1.0);
  EXPECT_FALSE(d.mup.base_head_dim.has_value());
  ArchitectureArgs zero;
  zero.use_mup = true;
  zero.mup_base_hidden_size = 0;
  EXPECT_THROW(mup_options(zero), Error);
}

// Sinkhorn routing and the shared expert's gate change the function the model computes (the
// evaluation routing, the gate): both survive the run's stored arguments and the architecture
// record a checkpoint keeps, so `generate` and --use-checkpoint-args rebuild the same layer.
TEST(CliArchitectureArgs, MoeRoutingFlagsSurviveTheStoredArguments) {
  Parsed p({"--num-experts", "4", "--moe-router-topk", "1", "--moe-router-load-balancing-type",
            "sinkhorn", "--moe-shared-expert-intermediate-size", "64", "--moe-shared-expert-gate"});
  const ArchitectureOptions o = architecture_options(p.arch);
  EXPECT_TRUE(o.moe.sinkhorn);
  EXPECT_TRUE(o.moe.shared_expert_gate);
  EXPECT_EQ(architecture_from_args_json(p.table.to_json()).moe, o.moe);
  EXPECT_EQ(architecture_from_args_json(architecture_args_json(o)).moe, o.moe);
  Parsed plain({"--num-experts", "4"});
  const ArchitectureOptions d = architecture_options(plain.arch);
  EXPECT_FALSE(d.moe.sinkhorn);
  EXPECT_FALSE(architecture_from_args_json(architecture_args_json(d)).moe.shared_expert_gate);
  // Aux-loss-free balancing: the stored arguments keep the bias and its rate; the model record
  // keeps the bias (it changes the routing), not the rate (a training setting).
  Parsed bias({"--num-experts", "4", "--moe-router-score-function", "sigmoid",
               "--moe-router-enable-expert-bias", "--moe-router-bias-update-rate", "0.01"});
  const ArchitectureOptions b = architecture_options(bias.arch);
  EXPECT_TRUE(b.moe.expert_bias);
  EXPECT_EQ(b.moe.bias_update_rate, 0.01);
  EXPECT_EQ(architecture_from_args_json(bias.table.to_json()).moe, b.moe);
  EXPECT_TRUE(architecture_from_args_json(architecture_args_json(b)).moe.expert_bias);
  EXPECT_FALSE(architecture_from_args_json(architecture_args_json(d)).moe.expert_bias);
  // --moe-router-dtype fp64 can route ties elsewhere: the model record keeps it. Megatron's
  // lists of balancing types and coefficients survive the stored arguments.
  Parsed f64({"--num-experts", "4", "--moe-router-dtype", "fp64",
              "--moe-router-load-balancing-type", "seq_aux_loss", "global_aux_loss",
              "--moe-aux-loss-coeff", "1e-3", "2e-3"});
  const ArchitectureOptions f = architecture_options(f64.arch);
  EXPECT_TRUE(f.moe.router_fp64);
  EXPECT_EQ(f.moe.seq_aux_loss_coeff, 1e-3);
  EXPECT_EQ(f.moe.global_aux_loss_coeff, 2e-3);
  EXPECT_EQ(architecture_from_args_json(f64.table.to_json()).moe, f.moe);
  EXPECT_TRUE(architecture_from_args_json(architecture_args_json(f)).moe.router_fp64);
  EXPECT_FALSE(architecture_from_args_json(architecture_args_json(d)).moe.router_fp64);
}

// The flex dispatcher (alltoall's exchange here) with Megatron's rules on its backends, and
// the router options refused by name.
TEST(CliArchitectureArgs, FlexDispatcherRulesAndRefusedRouterOptions) {
  for (const char* backend : {"deepep", "hybridep", "ncclep"}) {
    Parsed flex({"--num-experts", "4", "--moe-token-dispatcher-type", "flex",
                 "--moe-flex-dispatcher-backend", backend});
    EXPECT_NO_THROW(architecture_options(flex.arch)) << backend;
  }
  const auto refused = [](std::vector<std::string> flags, const std::string& message) {
    flags.insert(flags.begin(), {"--num-experts", "4"});
    Parsed p(flags);
    try {
      validate_moe_options(architecture_options(p.arch).moe, 2, 64, 1);
      ADD_FAILURE() << "accepted " << flags.back();
    } catch (const Error& e) {
      EXPECT_THAT(e.message(), HasSubstr(message));
    }
  };
  refused({"--moe-enable-deepep"}, "--moe-enable-deepep needs --moe-token-dispatcher-type flex");
  refused({"--moe-token-dispatcher-type", "flex", "--moe-enable-deepep",
           "--moe-flex-dispatcher-backend", "hybridep"},
          "name two backends");
  refused({"--moe-flex-dispatcher-backend", "ncclep"}, "ncclep needs --moe-token-dispatcher-type");
  refused({"--moe-token-dispatcher-type", "flex", "--moe-expert-capacity-factor", "1",
           "--moe-pad-expert-input-to-capacity"},
          "does not take --moe-pad-expert-input-to-capacity");
  refused({"--moe-router-enable-expert-bias"}, "adds its bias to sigmoid scores");
  refused({"--moe-router-load-balancing-type", "quantile_balancing"},
          "--moe-router-load-balancing-type quantile_balancing is not implemented");
  refused({"--moe-router-dtype", "fp64", "--moe-router-load-balancing-type", "sinkhorn"},
          "--moe-router-dtype fp64 with --moe-router-load-balancing-type sinkhorn is not");
  refused({"--moe-router-dtype", "fp16"}, "--moe-router-dtype 'fp16' is not known");
}

// --experimental-attention-variant dsa and its options survive the stored arguments (our table's
// names, --no-* included, and Megatron's), so --use-checkpoint-args rebuilds the same indexer;
// the options Megatron has and megatron-cpp does not implement are refused by name.
TEST(CliArchitectureArgs, DsaFlagsSurviveTheStoredArguments) {
  Parsed p({"--multi-latent-attention", "--experimental-attention-variant", "dsa",
            "--dsa-indexer-n-heads", "8", "--dsa-indexer-head-dim", "32", "--dsa-indexer-topk",
            "16", "--dsa-indexer-loss-coeff", "0.01", "--dsa-indexer-use-sparse-loss",
            "--no-dsa-indexer-scoring-relu", "--disable-dsa-indexer-rotate-activation",
            "--dsa-indexer-rope-interleaved", "--dsa-indexer-k-norm-epsilon", "1e-6"});
  const ArchitectureOptions o = architecture_options(p.arch);
  EXPECT_EQ(o.dsa, (DsaOptions{.enabled = true,
                               .indexer_heads = 8,
                               .indexer_head_dim = 32,
                               .topk = 16,
                               .loss_coeff = 0.01f,
                               .sparse_loss = true,
                               .scoring_relu = false,
                               .rope_interleaved = true,
                               .rotate_activation = false,
                               .k_norm_epsilon = 1e-6f}));
  EXPECT_EQ(architecture_from_args_json(p.table.to_json()).dsa, o.dsa);
  EXPECT_EQ(architecture_from_args_json(architecture_args_json(o)).dsa, o.dsa);
  EXPECT_FALSE(architecture_options(Parsed({}).arch).dsa.enabled);
  EXPECT_TRUE(architecture_args_json(architecture_options(Parsed({}).arch))
                  .at("experimental_attention_variant")
                  .is_null());

  auto refusal = [](std::vector<std::string> flags) {
    try {
      architecture_options(Parsed(std::move(flags)).arch);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::vector<std::string> dsa = {
      "--experimental-attention-variant", "dsa", "--dsa-indexer-n-heads", "8",
      "--dsa-indexer-head-dim",           "32",  "--dsa-indexer-topk",    "16"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> all = dsa;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  EXPECT_THAT(refusal({"--experimental-attention-variant", "gdn"}),
              HasSubstr("--experimental-attention-variant 'gdn' is not implemented"));
  EXPECT_THAT(refusal({"--experimental-attention-variant", "dsa"}),
              HasSubstr("needs --dsa-indexer-n-heads"));
  EXPECT_THAT(refusal(with({"--dsa-indexer-topk-freq", "2"})),
              HasSubstr("--dsa-indexer-topk-freq 2: sharing one layer's top-k keys"));
  EXPECT_THAT(refusal(with({"--dsa-kernel-backend", "triton"})),
              HasSubstr("--dsa-kernel-backend 'triton' is not known"));
  EXPECT_EQ(refusal(with({"--dsa-kernel-backend", "tilelang", "--dsa-indexer-k-norm-fp32"})), "");
}

TEST(CliArchitectureArgs, DefaultsAreGpt2AndOldCheckpointsReadAsGpt2) {
  Parsed p({});
  const ArchitectureOptions o = architecture_options(p.arch);
  EXPECT_EQ(o.position_embedding, PositionEmbedding::kLearnedAbsolute);
  EXPECT_EQ(o.normalization, Normalization::kLayerNorm);
  EXPECT_EQ(o.num_query_groups, 0);  // --num-query-groups alone does nothing, as in Megatron
  EXPECT_TRUE(o.add_bias_linear);
  EXPECT_EQ(norm_epsilon(p.arch, 1e-5), 1e-5f);
  const nlohmann::json gpt2_args = {{"num_layers", 2}, {"layernorm_epsilon", 1e-5}};
  EXPECT_EQ(architecture_args_json(architecture_from_args_json(gpt2_args)),
            architecture_args_json(o));
}

// GeLU as Megatron: erf unless --openai-gelu; stored as "openai_gelu" with the other arguments,
// and a checkpoint from before the erf form (no "openai_gelu") reads as the tanh it computed.
TEST(CliArchitectureArgs, GeluIsErfByDefaultTanhWithOpenaiGeluAndOldCheckpointsReadAsTanh) {
  auto stored = [](std::vector<std::string> flags) {
    CLI::App app;
    Args args;
    ArgTable table(app);
    add_training_args(table, args);
    std::vector<char*> argv{const_cast<char*>("pretrain-gpt")};
    for (std::string& f : flags) argv.push_back(f.data());
    app.parse(int(argv.size()), argv.data());
    return std::pair{args.gelu_form(), table.to_json()};
  };
  const auto [erf, erf_args] = stored({});
  EXPECT_EQ(erf, kernels::GeluForm::kErf);
  EXPECT_EQ(erf_args.at("openai_gelu"), false);
  EXPECT_EQ(gelu_form_from_args_json(erf_args), kernels::GeluForm::kErf);
  const auto [tanh, tanh_args] = stored({"--openai-gelu"});
  EXPECT_EQ(tanh, kernels::GeluForm::kTanh);
  EXPECT_EQ(gelu_form_from_args_json(tanh_args), kernels::GeluForm::kTanh);
  EXPECT_EQ(gelu_form_from_args_json({{"num_layers", 2}}), kernels::GeluForm::kTanh);
  for (kernels::GeluForm form : {kernels::GeluForm::kErf, kernels::GeluForm::kTanh})
    EXPECT_EQ(gelu_form_from_args_json(gelu_args_json(form)), form);
}

TEST(CliArchitectureArgs, BadValuesAreNamed) {
  auto message = [](std::vector<std::string> flags) {
    try {
      Parsed p(std::move(flags));
      architecture_options(p.arch);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_THAT(message({"--position-embedding-type", "alibi"}),
              HasSubstr("--position-embedding-type must be learned_absolute, rope, yarn or none"));
  EXPECT_THAT(message({"--normalization", "BatchNorm"}),
              HasSubstr("--normalization must be LayerNorm or RMSNorm, got 'BatchNorm'"));
  EXPECT_THAT(message({"--group-query-attention", "--num-query-groups", "0"}),
              HasSubstr("--num-query-groups must be positive"));
}

}  // namespace
}  // namespace megatron::cli
