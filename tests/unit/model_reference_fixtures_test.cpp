// The committed PyTorch goldens are self-consistent: their losses follow from their logits by
// an independent double-precision cross-entropy, and the HF fixtures hold the tensors their
// config.json describes. (The BERT golden is used by the BERT model's test; this keeps it
// readable and meaningful until then.)
#include <gtest/gtest.h>

#include <cmath>

#include "../common/gpt2_golden.h"

namespace megatron {
namespace {

using namespace megatron::testing;

// Cross-entropy of one row of logits [n] at `label`, in double.
double cross_entropy(const float* logits, int64_t n, int64_t label) {
  double max = logits[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, double(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - max);
  return std::log(sum) + max - double(logits[label]);
}

TEST(ReferenceFixtures, Gpt2LossFollowsFromLogits) {
  SafetensorsReader g(gpt2_fixture_dir() + "/golden.safetensors");
  Tensor logits = g.get("logits"), labels = g.get("labels"), mask = g.get("loss_mask");
  const int64_t b = logits.size(0), s = logits.size(1), v = logits.size(2);
  double sum = 0, count = 0;
  for (int64_t i = 0; i < b * s; ++i) {
    const double m = mask.data<float>()[i];
    sum += m * cross_entropy(logits.data<float>() + i * v, v, labels.data<int32_t>()[i]);
    count += m;
  }
  EXPECT_LT(count, double(b * s));  // some tokens are masked
  EXPECT_NEAR(sum / count, g.get("loss").data<double>()[0], 1e-5);
}

TEST(ReferenceFixtures, BertLossesFollowFromLogits) {
  const std::string dir = source_dir() + "/tests/data/bert_tiny";
  SafetensorsReader g(dir + "/golden.safetensors");
  Tensor mlm = g.get("mlm_logits"), labels = g.get("mlm_labels");
  const int64_t v = mlm.size(2);
  double sum = 0;
  int count = 0;
  for (int64_t i = 0; i < labels.numel(); ++i) {
    const int32_t label = labels.data<int32_t>()[i];
    if (label == -100) continue;
    sum += cross_entropy(mlm.data<float>() + i * v, v, label);
    ++count;
  }
  EXPECT_GT(count, 0);
  EXPECT_NEAR(sum / count, g.get("mlm_loss").data<double>()[0], 1e-5);
  Tensor sop = g.get("sop_logits"), sop_labels = g.get("sop_labels");
  double sop_loss = 0;
  for (int64_t r = 0; r < sop.size(0); ++r)
    sop_loss += cross_entropy(sop.data<float>() + r * 2, 2, sop_labels.data<int32_t>()[r]);
  sop_loss /= double(sop.size(0));
  EXPECT_NEAR(sop_loss, g.get("sop_loss").data<double>()[0], 1e-5);
  EXPECT_NEAR(g.get("loss").data<double>()[0],
              g.get("mlm_loss").data<double>()[0] + g.get("sop_loss").data<double>()[0], 1e-12);

  // Padding: the second sample ends in padding with attention_mask 0 and no MLM label.
  Tensor ids = g.get("input_ids"), attention = g.get("attention_mask");
  const int64_t s = ids.size(1);
  EXPECT_EQ(attention.data<int32_t>()[2 * s - 1], 0);
  EXPECT_EQ(labels.data<int32_t>()[2 * s - 1], -100);

  HfDirectory hf = read_hf_directory(dir + "/hf");
  EXPECT_EQ(hf.config["hidden_act"], "gelu");  // the erf form
  const int64_t h = hf.config["hidden_size"], vocab = hf.config["vocab_size"];
  EXPECT_EQ(hf.tensors.at("bert.embeddings.word_embeddings.weight").shape(), (Shape{vocab, h}));
  EXPECT_EQ(hf.tensors.at("bert.encoder.layer.1.intermediate.dense.weight").shape(),
            (Shape{hf.config["intermediate_size"].get<int64_t>(), h}));
  EXPECT_EQ(hf.tensors.count("cls.predictions.decoder.weight"), 0u);  // tied
  for (const auto& [name, t] : hf.tensors) {
    if (name == "bert.embeddings.position_ids") continue;  // a buffer
    EXPECT_EQ(g.contains("grad." + name), true) << name;
  }
}

}  // namespace
}  // namespace megatron
