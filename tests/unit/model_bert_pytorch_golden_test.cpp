// BERT against PyTorch: the tiny post-LN BertForPreTraining of tests/data/bert_tiny (written
// by tools/reference/bert_reference.py) imported from HF layout must reproduce PyTorch's MLM
// and SOP logits and losses (relative ≤ 1e-4) and the gradient of every HF weight (≤ 1e-3);
// export must give back the fixture's tensors exactly; bad HF inputs are errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../common/bert_golden.h"
#include "../common/gpt2_golden.h"  // max_relative_error
#include "model_test_util.h"

namespace megatron {
namespace {

using testing::BertGolden;
using testing::load_bert_golden;
using testing::LoadedBert;
using testing::max_relative_error;

constexpr int64_t kPaddedVocab = 128;  // vocab 100 padded: padding must not matter

TEST(BertPytorchGolden, LogitsLossesAndGradientsMatchPytorch) {
  BertGolden g = load_bert_golden(kPaddedVocab);
  LoadedBert m(g, test::solo_parallel_state());
  const BertLosses losses = m.model->forward_backward(g.batch, 1.0f, 7);
  EXPECT_NEAR(losses.lm, g.golden("mlm_loss"), 1e-4 * g.golden("mlm_loss"));
  EXPECT_NEAR(losses.sop, g.golden("sop_loss"), 1e-4 * g.golden("sop_loss"));
  const BertLosses eval = m.model->forward_loss(g.batch);
  EXPECT_NEAR(eval.total(), g.golden("loss"), 1e-4 * g.golden("loss"));

  TensorMap ours;
  for (const Parameter& p : m.store.params()) ours[p.spec.name] = p.grad;
  const TensorMap hf_grads = hf_tensors_from_bert(ours, m.model->config());
  EXPECT_EQ(hf_grads.size(), g.hf_grads.size());
  for (const auto& [name, want] : g.hf_grads) {
    ASSERT_TRUE(hf_grads.count(name)) << name;
    // The key bias adds the same q·b_k to every score of a softmax row, so its exact gradient
    // is zero and both sides hold rounding noise: compare those absolutely.
    const bool exactly_zero = name.find("attention.self.key.bias") != std::string::npos;
    if (exactly_zero) {
      for (float v : hf_grads.at(name).to_vector<float>()) EXPECT_LT(std::fabs(v), 1e-6) << name;
      for (float v : want.to_vector<float>()) EXPECT_LT(std::fabs(v), 1e-6) << name;
    } else {
      EXPECT_LE(max_relative_error(hf_grads.at(name), want), 1e-3) << name;
    }
  }

  const BertOutputs out =
      m.model->forward_logits(g.batch.tokens, g.batch.token_types, g.batch.pad_mask);
  EXPECT_LE(max_relative_error(out.mlm_logits, g.file->get("mlm_logits")), 1e-4);
  EXPECT_LE(max_relative_error(out.sop_logits, g.file->get("sop_logits")), 1e-4);
}

TEST(BertPytorchGolden, ExportReproducesTheFixtureTensorsExactly) {
  BertGolden g = load_bert_golden(kPaddedVocab);
  LoadedBert m(g, test::solo_parallel_state());
  TensorMap ours;
  for (const Parameter& p : m.store.params()) ours[p.spec.name] = p.value;
  const TensorMap exported = hf_tensors_from_bert(ours, m.model->config());
  EXPECT_EQ(exported.size() + 1, g.hf.tensors.size());  // + the position_ids buffer
  for (const auto& [name, t] : exported) {
    ASSERT_TRUE(g.hf.tensors.count(name)) << name;
    const Tensor& want = g.hf.tensors.at(name);
    ASSERT_EQ(t.shape(), want.shape()) << name;
    EXPECT_EQ(std::memcmp(t.raw_data(), want.raw_data(), want.nbytes()), 0) << name;
  }
  EXPECT_EQ(hf_config_from_bert(m.model->config())["hidden_act"], "gelu");
}

TEST(BertHfImport, QkvRowsArePerHead) {
  BertGolden g = load_bert_golden(kPaddedVocab);
  const TensorMap ours = bert_tensors_from_hf(g.hf.tensors, g.config);
  const Tensor& qkv = ours.at("layers.1.self_attention.query_key_value.weight");  // [3h, h]
  const int64_t h = g.config.hidden_size, d = h / g.config.num_attention_heads;
  // Head 2's key rows come right after head 2's query rows.
  const Tensor key = g.hf.tensors.at("bert.encoder.layer.1.attention.self.key.weight");
  for (int64_t e = 0; e < d; ++e)
    for (int64_t c = 0; c < h; ++c)
      EXPECT_EQ(qkv.data<float>()[((2 * 3 + 1) * d + e) * h + c],
                key.data<float>()[(2 * d + e) * h + c]);
}

TEST(BertHfImport, AcceptsBareNamesTfLayerNormNamesAndTiedDecoder) {
  BertGolden g = load_bert_golden(kPaddedVocab);
  TensorMap renamed;
  for (const auto& [name, t] : g.hf.tensors) {
    std::string n = name.rfind("bert.", 0) == 0 ? name.substr(5) : name;  // bare BertModel names
    if (n == "embeddings.LayerNorm.weight") n = "embeddings.LayerNorm.gamma";
    if (n == "embeddings.LayerNorm.bias") n = "embeddings.LayerNorm.beta";
    renamed[n] = t;
  }
  renamed["cls.predictions.decoder.weight"] =
      g.hf.tensors.at("bert.embeddings.word_embeddings.weight");
  renamed["cls.predictions.decoder.bias"] = g.hf.tensors.at("cls.predictions.bias");
  const TensorMap a = bert_tensors_from_hf(renamed, g.config);
  const TensorMap b = bert_tensors_from_hf(g.hf.tensors, g.config);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : b)
    EXPECT_EQ(std::memcmp(a.at(name).raw_data(), t.raw_data(), t.nbytes()), 0) << name;
}

TEST(BertHfImport, ReportsEveryMissingUnexpectedAndMisshapedTensor) {
  BertGolden g = load_bert_golden(kPaddedVocab);
  TensorMap bad = g.hf.tensors;
  bad.erase("bert.encoder.layer.0.attention.self.value.bias");
  bad["bert.encoder.layer.1.output.dense.weight"] = Tensor::zeros({4, 4}, DType::F32);
  bad["bert.encoder.layer.9.output.dense.weight"] = Tensor::zeros({4, 4}, DType::F32);
  bad["cls.predictions.decoder.weight"] = Tensor::zeros({100, 32}, DType::F32);
  try {
    bert_tensors_from_hf(bad, g.config);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("missing bert.encoder.layer.0.attention.self.value.bias"), std::string::npos);
    EXPECT_NE(m.find("bert.encoder.layer.1.output.dense.weight: shape [4, 4], expected [32, 128]"),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("unexpected bert.encoder.layer.9.output.dense.weight"), std::string::npos);
    EXPECT_NE(m.find("untied"), std::string::npos);
  }
}

TEST(BertHfImport, RejectsConfigsOurModelDoesNotCompute) {
  BertGolden g = load_bert_golden(kPaddedVocab);
  nlohmann::json c = g.hf.config;
  c["hidden_act"] = "relu";
  EXPECT_THROW(bert_config_from_hf(c, kPaddedVocab, true), Error);
  c = g.hf.config;
  c["position_embedding_type"] = "relative_key";
  EXPECT_THROW(bert_config_from_hf(c, kPaddedVocab, true), Error);
  c = g.hf.config;
  c.erase("num_hidden_layers");
  EXPECT_THROW(bert_config_from_hf(c, kPaddedVocab, true), Error);
}

// A pre-LN BERT (Megatron-LM's) is HF's MegatronBertForPreTraining, and reads back as pre-LN.
TEST(BertHfImport, PreLayerNormIsMegatronBert) {
  BertGolden g = load_bert_golden(kPaddedVocab);
  BertConfig pre_ln = g.config;
  pre_ln.layernorm_order = LayerNormOrder::kPreLayerNorm;
  const nlohmann::json hf = hf_config_from_bert(pre_ln);
  EXPECT_EQ(hf["model_type"], "megatron-bert");
  EXPECT_EQ(hf["architectures"][0], "MegatronBertForPreTraining");
  EXPECT_EQ(bert_config_from_hf(hf, kPaddedVocab, true).layernorm_order,
            LayerNormOrder::kPreLayerNorm);
  EXPECT_EQ(bert_config_from_hf(g.hf.config, kPaddedVocab, true).layernorm_order,
            LayerNormOrder::kPostLayerNorm);
}

}  // namespace
}  // namespace megatron
