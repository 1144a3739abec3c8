// Llama-family models against PyTorch at TP = 1: the HF fixtures (LlamaForCausalLM with GQA
// and an untied head; Qwen2ForCausalLM with q/k/v biases; Qwen3ForCausalLM with the per-head
// QK RMSNorm, --qk-layernorm) imported into our GPT give the
// logits, loss and gradients a plain-torch float64 model computed
// (tools/reference/llama_reference.py). Also: recompute is bit-identical, HF export gives the
// fixture's tensors back exactly, KV-cache decoding with RoPE continues positions from the
// cache length (also past the training length), and bad configs get clear errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../common/llama_golden.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using namespace megatron::testing;

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

TEST(LlamaPytorchGolden, LlamaLogitsLossAndGradientsMatchPytorch) {
  const LlamaGolden g = load_llama_golden("llama_tiny", 128);  // vocab 96 padded to 128
  EXPECT_EQ(g.config.arch.num_query_groups, 2);
  EXPECT_TRUE(g.config.arch.untie_embeddings_and_output_weights);
  expect_matches_llama_golden(g, solo());
}

TEST(LlamaPytorchGolden, Qwen2WithQkvBiasesMatchesPytorch) {
  const LlamaGolden g = load_llama_golden("qwen2_tiny", 96);
  EXPECT_TRUE(g.config.arch.add_qkv_bias);
  expect_matches_llama_golden(g, solo());
}

TEST(LlamaPytorchGolden, Qwen3WithQkNormMatchesPytorch) {
  const LlamaGolden g = load_llama_golden("qwen3_tiny", 96);
  EXPECT_TRUE(g.config.arch.qk_layernorm);
  expect_matches_llama_golden(g, solo());
  expect_matches_llama_golden(g, solo(), /*recompute=*/true);
}

TEST(LlamaPytorchGolden, RecomputeIsBitIdentical) {
  const LlamaGolden g = load_llama_golden("llama_tiny", 128);
  LlamaFromFixture plain(g, solo()), recompute(g, solo(), true);
  const float a = plain.model->forward_backward(g.batch, 1.0f, 99);
  const float b = recompute.model->forward_backward(g.batch, 1.0f, 99);
  EXPECT_EQ(a, b);
  EXPECT_EQ(plain.store.flat_grads().to_vector<float>(),
            recompute.store.flat_grads().to_vector<float>());
}

TEST(LlamaPytorchGolden, ExportReproducesTheFixtureTensorsExactly) {
  for (const char* fixture : {"llama_tiny", "qwen2_tiny", "qwen3_tiny"}) {
    SCOPED_TRACE(fixture);
    const LlamaGolden g = load_llama_golden(fixture, 128);
    LlamaFromFixture m(g, solo());
    TensorMap ours;
    for (const Parameter& p : m.store.params()) ours[p.spec.name] = p.value;
    TensorMap exported = hf_llama_tensors_from_gpt(ours, g.config);
    ASSERT_EQ(exported.size(), g.hf.tensors.size());
    for (const auto& [name, original] : g.hf.tensors) {
      SCOPED_TRACE(name);
      ASSERT_EQ(exported.count(name), 1u);
      EXPECT_EQ(exported.at(name).to_vector<float>(), original.to_vector<float>());
    }
    // The config round-trips too.
    const nlohmann::json back =
        hf_llama_config_from_gpt(g.config, hf_llama_architecture(g.hf.config));
    for (const char* key : {"num_key_value_heads", "rope_theta", "rms_norm_eps",
                            "tie_word_embeddings", "intermediate_size", "model_type"})
      EXPECT_EQ(back.at(key), g.hf.config.at(key)) << key;
  }
}

// Decoding token by token through the KV cache (RoPE positions continue from the cache length)
// gives the logits of the full-sequence forward, over 40 positions: past the fixture's
// training length of 16.
TEST(LlamaPytorchGolden, KvCacheDecodingContinuesRotaryPositions) {
  const LlamaGolden g = load_llama_golden("llama_tiny", 128);
  LlamaFromFixture m(g, solo());
  const int64_t s = 40;
  std::vector<int32_t> ids(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) ids[size_t(i)] = int32_t((i * 37 + 5) % 96);
  const Tensor tokens = Tensor::from_vector(ids, {1, s});
  const Tensor full = m.model->forward_logits(tokens);  // [1, s, V]
  InferenceCtx ctx = m.model->make_inference_ctx(1, s);
  // A prompt of 7, then one token at a time.
  Tensor prompt_logits = m.model->forward_step(ctx, tokens.slice(1, 0, 7).clone(), true);
  EXPECT_LE(max_relative_error(prompt_logits.slice(2, 0, 96).select(1, 0).clone(),
                               full.select(0, 0).slice(0, 0, 7).clone()),
            1e-5);
  for (int64_t i = 7; i < s; ++i) {
    Tensor step = m.model->forward_step(ctx, tokens.slice(1, i, i + 1).clone());  // [1, Vp]
    EXPECT_LE(max_relative_error(step.slice(1, 0, 96).clone(),
                                 full.select(0, 0).slice(0, i, i + 1).clone()),
              1e-5)
        << "position " << i;
  }
}

TEST(LlamaConfigErrors, BadGroupsAndUnsupportedHfConfigsAreNamed) {
  LlamaGolden g = load_llama_golden("llama_tiny", 128);
  GptConfig c = g.config;
  c.arch.num_query_groups = 3;
  try {
    c.validate(1);
    ADD_FAILURE() << "no error for 3 query groups of 8 heads";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--num-query-groups 3 does not divide"));
  }
  c.arch.num_query_groups = 2;
  try {
    c.validate(8);  // 2 groups over 8 ranks: replicated, fine; 8 heads over 8 ranks: fine
    c.validate(3);
    ADD_FAILURE() << "no error for TP 3";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--tensor-model-parallel-size 3"));
  }
  nlohmann::json hf = g.hf.config;
  hf["hidden_act"] = "gelu";
  EXPECT_THROW(
      {
        try {
          gpt_config_from_hf_llama(hf, 128);
        } catch (const Error& e) {
          EXPECT_THAT(e.message(), HasSubstr("hidden_act 'gelu'"));
          throw;
        }
      },
      Error);
  TensorMap tensors = g.hf.tensors;
  tensors.erase("model.layers.1.self_attn.k_proj.weight");
  try {
    gpt_tensors_from_hf_llama(tensors, g.config);
    ADD_FAILURE() << "no error for a missing k_proj";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("layers.1.self_attn.k_proj.weight: missing"));
  }
}

}  // namespace
}  // namespace megatron
