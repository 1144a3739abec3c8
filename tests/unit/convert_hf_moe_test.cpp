// HF mixture-of-experts conversions (convert/hf_moe.h): the tiny Mixtral, Qwen2-MoE and Qwen3-MoE
// fixtures (tools/reference/hf_moe_reference.py) give the MoE options that reproduce HF's routing;
// imported at TP 1, 2 and 4 and exported back they give the fixture's files byte for byte; and the
// configs and models one side cannot express are refused by name. Their loss and gradient norm
// against PyTorch, at EP and TP layouts: tests/e2e/convert_hf_moe.sh.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "../common/error_of.h"
#include "../common/file_bytes.h"
#include "../common/source_dir.h"
#include "../common/temp_dir.h"
#include "checkpoint/architecture_json.h"
#include "checkpoint/shards.h"
#include "convert/hf_directory.h"
#include "convert/hf_llama.h"
#include "convert/hf_moe.h"
#include "convert/llama_checkpoint.h"

namespace megatron {
namespace {

using namespace megatron::testing;

std::string fixture_dir(const std::string& name) {
  return source_dir() + "/tests/data/" + name + "_tiny/hf";
}

nlohmann::json fixture_config(const std::string& name) {
  return read_hf_directory(fixture_dir(name)).config;
}

TEST(HfMoeConvert, MixtralRoutesAsMegatronsPostSoftmaxRouter) {
  const GptConfig c = gpt_config_from_hf_llama(fixture_config("mixtral"), 64);
  const MoeOptions& m = c.arch.moe;
  EXPECT_EQ(m.num_experts, 4);
  EXPECT_EQ(m.topk, 2);
  EXPECT_EQ(m.ffn_hidden_size, 16);
  EXPECT_FALSE(m.pre_softmax);  // softmax over the top k = HF's renormalised top k
  EXPECT_EQ(m.score_function, MoeScoreFunction::kSoftmax);
  EXPECT_EQ(m.layer_freq, "1");
  EXPECT_EQ(m.shared_expert_ffn, 0);
  EXPECT_EQ(m.aux_loss_coeff, 0.0);
  EXPECT_FALSE(m.topk_scaling_factor.has_value());
  EXPECT_FALSE(c.arch.add_qkv_bias);
  EXPECT_FALSE(c.arch.qk_layernorm);
  EXPECT_EQ(hf_moe_architecture_of(c), "MixtralForCausalLM");
}

TEST(HfMoeConvert, Qwen2MoeRoutesPreSoftmaxWithItsGatedSharedExpertAndDenseLayers) {
  const GptConfig c = gpt_config_from_hf_llama(fixture_config("qwen2_moe"), 64);
  const MoeOptions& m = c.arch.moe;
  EXPECT_EQ(m.num_experts, 4);
  EXPECT_TRUE(m.pre_softmax);  // norm_topk_prob false: the top k of the softmax over all
  EXPECT_EQ(m.ffn_hidden_size, 16);
  EXPECT_EQ(c.ffn_hidden_size, 48);  // the dense layer's intermediate_size
  EXPECT_EQ(m.shared_expert_ffn, 24);
  EXPECT_TRUE(m.shared_expert_gate);
  EXPECT_EQ(m.layer_freq, "[1,0,1]");  // mlp_only_layers [1]
  EXPECT_TRUE(c.arch.add_qkv_bias);
  EXPECT_EQ(hf_moe_architecture_of(c), "Qwen2MoeForCausalLM");
}

// Newer transformers write Qwen2-MoE's qkv_bias (default true); false exports back as false.
TEST(HfMoeConvert, Qwen2MoeQkvBiasKeyIsHonoured) {
  nlohmann::json j = fixture_config("qwen2_moe");
  j["qkv_bias"] = false;
  const GptConfig c = gpt_config_from_hf_llama(j, 64);
  EXPECT_FALSE(c.arch.add_qkv_bias);
  const nlohmann::json back = hf_llama_config_from_gpt(c, "Qwen2MoeForCausalLM");
  EXPECT_EQ(back.value("qkv_bias", true), false);
  EXPECT_FALSE(gpt_config_from_hf_llama(back, 64).arch.add_qkv_bias);
  EXPECT_FALSE(hf_llama_config_from_gpt(gpt_config_from_hf_llama(fixture_config("qwen2_moe"), 64),
                                        "Qwen2MoeForCausalLM")
                   .contains("qkv_bias"));
}

TEST(HfMoeConvert, Qwen3MoeRenormalisesWithQkNormsAndSparseStep) {
  const GptConfig c = gpt_config_from_hf_llama(fixture_config("qwen3_moe"), 64);
  EXPECT_FALSE(c.arch.moe.pre_softmax);       // norm_topk_prob true
  EXPECT_EQ(c.arch.moe.layer_freq, "[0,1]");  // decoder_sparse_step 2
  EXPECT_TRUE(c.arch.qk_layernorm);
  EXPECT_EQ(c.arch.kv_channels, 16);
  EXPECT_EQ(hf_moe_architecture_of(c), "Qwen3MoeForCausalLM");
}

TEST(HfMoeConvert, TensorsAndConfigRoundTripInMemory) {
  for (const char* fixture : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    SCOPED_TRACE(fixture);
    const HfDirectory hf = read_hf_directory(fixture_dir(fixture));
    const GptConfig c = gpt_config_from_hf_llama(hf.config, 64);
    const TensorMap ours = gpt_tensors_from_hf_llama(hf.tensors, c);
    const std::string last = "layers." + std::to_string(c.num_layers - 1);
    EXPECT_EQ(ours.at(last + ".mlp.router.weight").shape(), (Shape{4, 32}))
        << "the last layer is sparse in every fixture";
    const TensorMap back = hf_llama_tensors_from_gpt(ours, c);
    ASSERT_EQ(back.size(), hf.tensors.size());
    for (const auto& [name, t] : hf.tensors) {
      ASSERT_EQ(back.count(name), 1u) << name;
      EXPECT_EQ(back.at(name).to_vector<float>(), t.to_vector<float>()) << name;
    }
    const nlohmann::json regenerated =
        hf_llama_config_from_gpt(c, hf_llama_architecture(hf.config));
    const GptConfig again = gpt_config_from_hf_llama(regenerated, 64);
    EXPECT_TRUE(again.arch.moe == c.arch.moe);
    EXPECT_EQ(again.arch.add_qkv_bias, c.arch.add_qkv_bias);
    EXPECT_EQ(again.arch.qk_layernorm, c.arch.qk_layernorm);
    EXPECT_EQ(again.ffn_hidden_size, c.ffn_hidden_size);
  }
}

TEST(HfMoeConvert, ImportExportIsByteIdenticalAtEveryTpSize) {
  for (const char* fixture : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    for (int tp : {1, 2, 4}) {
      SCOPED_TRACE(::testing::Message() << fixture << " tp=" << tp);
      TempDir dir;
      import_hf_llama(fixture_dir(fixture), dir.file("ckpt"), tp, 16);
      const nlohmann::json state = CheckpointShardReader(dir.file("ckpt/iter_0000000")).state(0, 0);
      EXPECT_TRUE(is_llama_checkpoint(state));
      EXPECT_EQ(architecture_from_args_json(state["args"]).moe.num_experts, 4);
      export_hf_llama(dir.file("ckpt"), -1, dir.file("hf"), 0);
      EXPECT_EQ(file_bytes(dir.file("hf/model.safetensors")),
                file_bytes(fixture_dir(fixture) + "/model.safetensors"));
      EXPECT_EQ(file_bytes(dir.file("hf/config.json")),
                file_bytes(fixture_dir(fixture) + "/config.json"));
    }
  }
}

TEST(HfMoeConvert, RefusesHfConfigsItCannotComputeByName) {
  auto import_error = [](const char* fixture, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = fixture_config(fixture);
    edit(j);
    return error_of([&] { gpt_config_from_hf_llama(j, 64); });
  };
  EXPECT_NE(import_error("mixtral", [](auto& j) { j["router_jitter_noise"] = 0.1; })
                .find("router_jitter_noise = 0.1 is not supported"),
            std::string::npos);
  EXPECT_NE(import_error("mixtral", [](auto& j) { j.erase("num_experts_per_tok"); })
                .find("has no integer 'num_experts_per_tok'"),
            std::string::npos);
  EXPECT_NE(import_error("qwen2_moe",
                         [](auto& j) {
                           j["mlp_only_layers"] = {0, 1, 2};
                         })
                .find("leave no sparse layer"),
            std::string::npos);
  EXPECT_NE(import_error("qwen2_moe", [](auto& j) { j["mlp_only_layers"] = {7}; })
                .find("mlp_only_layers entry 7 is not a layer number"),
            std::string::npos);
  EXPECT_NE(import_error("qwen2_moe", [](auto& j) { j["shared_expert_intermediate_size"] = 0; })
                .find("shared_expert_intermediate_size must be > 0"),
            std::string::npos);
  EXPECT_NE(import_error("qwen3_moe", [](auto& j) { j["num_experts_per_tok"] = 5; })
                .find("--moe-router-topk 5 must be between 1 and --num-experts 4"),
            std::string::npos);
  // A missing expert is named among the weights' problems.
  HfDirectory hf = read_hf_directory(fixture_dir("mixtral"));
  const GptConfig c = gpt_config_from_hf_llama(hf.config, 64);
  hf.tensors.erase("model.layers.1.block_sparse_moe.experts.3.w2.weight");
  EXPECT_NE(error_of([&] {
              gpt_tensors_from_hf_llama(hf.tensors, c);
            }).find("layers.1.block_sparse_moe.experts.3.w2.weight: missing"),
            std::string::npos);
}

TEST(HfMoeConvert, RefusesModelsHfCannotExpressByFlag) {
  auto export_error = [](const char* fixture, const char* architecture,
                         const std::function<void(GptConfig&)>& edit) {
    GptConfig c = gpt_config_from_hf_llama(fixture_config(fixture), 64);
    edit(c);
    return error_of([&] { hf_llama_config_from_gpt(c, architecture); });
  };
  const char* mixtral = "MixtralForCausalLM";
  auto has = [](const std::string& message, const char* part) {
    return message.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(export_error("mixtral", mixtral, [](auto& c) { c.arch.moe.pre_softmax = true; }),
                  "MixtralForCausalLM renormalises the top-k routing weights"));
  EXPECT_TRUE(
      has(export_error("mixtral", mixtral, [](auto& c) { c.arch.moe.topk_scaling_factor = 2.0; }),
          "--moe-router-topk-scaling-factor 2"));
  EXPECT_TRUE(
      has(export_error("mixtral", mixtral, [](auto& c) { c.arch.moe.capacity_factor = 1.0; }),
          "--moe-expert-capacity-factor"));
  EXPECT_TRUE(
      has(export_error("mixtral", mixtral,
                       [](auto& c) { c.arch.moe.score_function = MoeScoreFunction::kSigmoid; }),
          "--moe-router-score-function sigmoid"));
  EXPECT_TRUE(has(
      export_error("mixtral", mixtral, [](auto& c) { c.arch.moe.layer_freq = std::to_string(2); }),
      "layer 1 is dense (--moe-layer-freq 2)"));
  EXPECT_TRUE(has(export_error("mixtral", "LlamaForCausalLM", [](auto&) {}),
                  "exports as MixtralForCausalLM, Qwen2MoeForCausalLM or Qwen3MoeForCausalLM"));
  EXPECT_TRUE(has(export_error("qwen2_moe", "Qwen2MoeForCausalLM",
                               [](auto& c) { c.arch.moe.shared_expert_gate = false; }),
                  "without --moe-shared-expert-gate"));
  EXPECT_TRUE(has(export_error("qwen3_moe", "Qwen2MoeForCausalLM", [](auto&) {}),
                  "Qwen2MoeForCausalLM has no QK norm (export to Qwen3MoeForCausalLM)"));
}

}  // namespace
}  // namespace megatron
