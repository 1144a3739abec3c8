// GPT-2 against PyTorch: the HF-layout fixture imported into our model (TP = 1) gives the
// logits, loss and gradients (mapped back to HF layout) that a plain-torch GPT-2 computed in
// float64 (tools/reference/gpt2_reference.py); export reproduces the fixture's tensors; the
// importer accepts HF's naming variants and reports bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "../common/gpt2_golden.h"
#include "distributed/solo_communicator.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;
using namespace megatron::testing;

ParallelState solo() {
  return ParallelState::create(std::make_shared<SoloCommunicator>(), 1, 1);
}

TEST(Gpt2PytorchGolden, LogitsLossAndGradientsMatchPytorch) {
  Gpt2Golden g = load_gpt2_golden(128);  // vocab 96 padded to 128: padding must not matter
  Gpt2FromFixture m(g, solo());

  Tensor logits = m.model->forward_logits(g.batch.tokens);
  EXPECT_LE(max_relative_error(logits, g.file->get("logits")), 1e-4);

  m.store.zero_grads();
  const double loss = m.model->forward_backward(g.batch, 1.0f, 1234);
  EXPECT_NEAR(loss, golden_loss(g), 1e-4 * golden_loss(g));
  EXPECT_NEAR(m.model->forward_loss(g.batch), golden_loss(g), 1e-4 * golden_loss(g));

  TensorMap ours;  // TP = 1: each gradient is already the full tensor
  for (const Parameter& p : m.store.params()) ours[p.spec.name] = p.grad;
  TensorMap hf = hf_tensors_from_gpt(ours, g.config);
  ASSERT_EQ(hf.size(), g.hf_grads.size());
  for (const auto& [name, expected] : g.hf_grads) {
    SCOPED_TRACE(name);
    ASSERT_EQ(hf.count(name), 1u);
    EXPECT_LE(max_relative_error(hf.at(name), expected), 1e-3);
  }
  // The padded vocabulary rows are never used, so they get no gradient.
  Tensor padded_rows = m.store.get("embedding.word_embeddings.weight").grad.slice(0, 96, 128);
  for (float v : padded_rows.to_vector<float>()) ASSERT_EQ(v, 0.0f);
}

TEST(Gpt2PytorchGolden, ExportReproducesTheFixtureTensorsExactly) {
  Gpt2Golden g = load_gpt2_golden(128);
  Gpt2FromFixture m(g, solo());
  TensorMap ours;
  for (const Parameter& p : m.store.params()) ours[p.spec.name] = p.value;
  TensorMap exported = hf_tensors_from_gpt(ours, g.config);
  size_t compared = 0;
  for (const auto& [name, original] : g.hf.tensors) {
    if (name.find(".attn.bias") != std::string::npos) continue;  // a buffer, not exported
    SCOPED_TRACE(name);
    ASSERT_EQ(exported.count(name), 1u);
    ASSERT_EQ(exported.at(name).shape(), original.shape());
    EXPECT_EQ(std::memcmp(exported.at(name).raw_data(), original.raw_data(), original.nbytes()), 0);
    ++compared;
  }
  EXPECT_EQ(compared, exported.size());
  nlohmann::json config = hf_config_from_gpt(g.config);
  for (const char* key : {"n_layer", "n_embd", "n_head", "vocab_size", "n_positions"})
    EXPECT_EQ(config[key], g.hf.config[key]) << key;
}

TEST(Gpt2PytorchGolden, QkvLayoutIsPerHead) {
  // Row r of our fused QKV weight is head r / (3·d), part (r / d) % 3, dim r % d; it must be
  // HF's c_attn column part·h + head·d + dim (an independent statement of the layout).
  Gpt2Golden g = load_gpt2_golden(128);
  TensorMap ours = gpt_tensors_from_hf(g.hf.tensors, g.config);
  const Tensor& qkv = ours.at("layers.1.self_attention.query_key_value.weight");  // [3h, h]
  const Tensor& c_attn = g.hf.tensors.at("h.1.attn.c_attn.weight");               // [h, 3h]
  const int64_t h = g.config.hidden_size, d = h / g.config.num_attention_heads;
  const float* o = qkv.data<float>();
  const float* f = c_attn.data<float>();
  int64_t bad = 0;
  for (int64_t r = 0; r < 3 * h; ++r) {
    const int64_t head = r / (3 * d), part = (r / d) % 3, dim = r % d;
    for (int64_t i = 0; i < h; ++i) bad += o[r * h + i] != f[i * 3 * h + part * h + head * d + dim];
  }
  EXPECT_EQ(bad, 0);
}

TEST(Gpt2HfImport, AcceptsTransformerPrefixAndTiedLmHead) {
  Gpt2Golden g = load_gpt2_golden(128);
  TensorMap prefixed;
  for (const auto& [name, t] : g.hf.tensors) prefixed["transformer." + name] = t;
  prefixed["lm_head.weight"] = g.hf.tensors.at("wte.weight");
  prefixed["transformer.h.0.attn.masked_bias"] = Tensor::zeros({}, DType::F32);
  TensorMap a = gpt_tensors_from_hf(g.hf.tensors, g.config);
  TensorMap b = gpt_tensors_from_hf(prefixed, g.config);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a)
    EXPECT_EQ(std::memcmp(t.raw_data(), b.at(name).raw_data(), t.nbytes()), 0) << name;
}

TEST(Gpt2HfImport, AcceptsHalfPrecisionWeights) {
  Gpt2Golden g = load_gpt2_golden(128);
  TensorMap half;
  for (const auto& [name, t] : g.hf.tensors) {
    Tensor h = Tensor::empty(t.shape(), DType::BF16);
    const float* src = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) h.data<bf16>()[i] = bf16(src[i]);
    half[name] = h;
  }
  TensorMap ours = gpt_tensors_from_hf(half, g.config);
  EXPECT_EQ(ours.at("final_layernorm.bias").data<float>()[3],
            float(bf16(g.hf.tensors.at("ln_f.bias").data<float>()[3])));
}

std::string import_error(const TensorMap& hf, const GptConfig& config) {
  try {
    gpt_tensors_from_hf(hf, config);
  } catch (const Error& e) {
    return e.message();
  }
  return "no error";
}

TEST(Gpt2HfImport, ReportsEveryMissingUnexpectedAndMisshapedTensor) {
  Gpt2Golden g = load_gpt2_golden(128);
  TensorMap hf = g.hf.tensors;
  hf.erase("h.1.mlp.c_fc.bias");
  hf["h.0.ln_1.weight"] = Tensor::zeros({31}, DType::F32);
  hf["h.2.ln_1.weight"] = Tensor::zeros({32}, DType::F32);
  std::string msg = import_error(hf, g.config);
  EXPECT_THAT(msg, HasSubstr("(3 problems)"));
  EXPECT_THAT(msg, HasSubstr("h.1.mlp.c_fc.bias: missing (expected shape [128])"));
  EXPECT_THAT(msg, HasSubstr("h.0.ln_1.weight: shape [31], expected [32]"));
  EXPECT_THAT(msg, HasSubstr("h.2.ln_1.weight: unexpected tensor [32]"));
}

TEST(Gpt2HfImport, RejectsUntiedLmHead) {
  Gpt2Golden g = load_gpt2_golden(128);
  TensorMap hf = g.hf.tensors;
  hf["lm_head.weight"] = Tensor::zeros({96, 32}, DType::F32);
  EXPECT_THAT(import_error(hf, g.config), HasSubstr("untied LM heads are not supported"));
}

TEST(Gpt2HfImport, RejectsConfigsOurModelDoesNotCompute) {
  nlohmann::json good = {
      {"n_layer", 2}, {"n_embd", 32}, {"n_head", 4}, {"vocab_size", 96}, {"n_positions", 32}};
  EXPECT_EQ(gpt_config_from_hf(good, 128).ffn_hidden_size, 0);
  auto error = [](nlohmann::json j) {
    try {
      gpt_config_from_hf(j, 128);
    } catch (const Error& e) {
      return e.message();
    }
    return std::string("no error");
  };
  nlohmann::json j = good;
  j["activation_function"] = "relu";
  EXPECT_THAT(error(j), HasSubstr("activation_function 'relu' is not supported"));
  // GPT-2's own "gelu_new" (and the default) is the tanh form, "gelu" the erf form.
  EXPECT_EQ(gpt_config_from_hf(good, 128).gelu, kernels::GeluForm::kTanh);
  j = good;
  j["activation_function"] = "gelu";
  EXPECT_EQ(gpt_config_from_hf(j, 128).gelu, kernels::GeluForm::kErf);
  EXPECT_EQ(hf_config_from_gpt(gpt_config_from_hf(j, 128))["activation_function"], "gelu");
  j = good;
  j.erase("n_head");
  EXPECT_THAT(error(j), HasSubstr("config.json has no 'n_head'"));
  j = good;
  j["n_embd"] = "wide";
  EXPECT_THAT(error(j), HasSubstr("'n_embd' = \"wide\" has the wrong type"));
  j = good;
  j["model_type"] = "llama";
  EXPECT_THAT(error(j), HasSubstr("expected \"gpt2\""));
}

}  // namespace
}  // namespace megatron
