// BertClassifier as pipeline stages (StageRange), as model_bert_stage_test.cpp does for BertModel:
// a 4-layer classifier cut into 2 stages of 2 layers, run by hand (stage 0's output fed to stage 1,
// stage 1's input gradient back to stage 0), computes what the whole classifier computes — the same
// initial weights (init keyed by name), the same loss bit for bit with dropout on (body and head),
// the same logits bit for bit with and without dropout, and the same gradient bit for bit for every
// parameter (the classifier has no tied embedding, so each lives on one stage) — for the
// multiple-choice head (RACE) and the classification head (MNLI), in both LayerNorm orders. Also:
// which stage holds what, and the errors for a whole-model call on a stage and for a backward
// without labels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bert_test_util.h"
#include "core/error.h"
#include "model/bert_classifier.h"
#include "model_test_util.h"
#include "stage_test_util.h"

namespace megatron {
namespace {

constexpr int64_t kVocab = 37, kPaddedVocab = 40;

BertClassifierConfig config(bool post_ln, bool multiple_choice) {
  BertClassifierConfig c;
  c.bert = test::tiny_bert_config(post_ln, kVocab, kPaddedVocab);
  c.bert.num_layers = 4;
  c.bert.hidden_dropout = 0.2f;
  c.bert.attention_dropout = 0.3f;
  c.multiple_choice = multiple_choice;
  c.head_name = multiple_choice ? "multichoice_head" : "classification_head";
  c.classes = multiple_choice ? 4 : 3;
  return c;
}

struct Classifier {
  Classifier(const BertClassifierConfig& c, StageRange range)
      : ps(test::solo_parallel_state()), store(0, 1), model(c, ps, store, range) {
    store.allocate();
    model.init_weights(31);
  }
  ParallelState ps;
  ParameterStore store;
  BertClassifier model;
};

// `samples` samples of `choices` rows each and labels 0, 1, 2, ... modulo the classes. Row i
// is row i % 3 of make_bert_input (0, 2 or 4 padded positions, both token types) with tokens
// of its own.
ClassifierBatch make_batch(const BertClassifierConfig& c, int64_t samples) {
  const int64_t k = c.multiple_choice ? c.classes : 1, rows = samples * k, s = c.bert.seq_length;
  std::vector<int32_t> tokens, types;
  std::vector<uint8_t> pad;
  for (int64_t i = 0; i < rows; ++i) {
    const test::RefBertInput in = test::make_bert_input(3, s, kVocab, uint64_t(5 + i));
    for (size_t j = size_t(i % 3 * s); j < size_t((i % 3 + 1) * s); ++j) {
      tokens.push_back(in.tokens[j]);
      types.push_back(in.types[j]);
      pad.push_back(uint8_t(in.pad[j]));
    }
  }
  std::vector<int32_t> labels;
  for (int64_t i = 0; i < samples; ++i) labels.push_back(int32_t(i % c.classes));
  ClassifierBatch batch;
  batch.tokens = Tensor::from_vector(tokens, {rows, s});
  batch.token_types = Tensor::from_vector(types, {rows, s});
  batch.pad_mask = Tensor::from_vector(pad, {rows, s});
  batch.labels = Tensor::from_vector(labels, {samples});
  batch.first_row = 7;
  batch.iteration = 3;
  return batch;
}

Tensor to_host(const Tensor& t) {
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  host.copy_from(t);
  return host;
}

bool any_nonzero(const Tensor& t) {
  for (float v : t.to_vector<float>())
    if (v != 0.0f) return true;
  return false;
}

using test::bitwise_equal;

void expect_stages_compute_the_whole_classifier(bool post_ln, bool multiple_choice) {
  const BertClassifierConfig c = config(post_ln, multiple_choice);
  const std::string head = c.head_name;
  Classifier whole(c, {});
  Classifier first(c, {0, 2, true, false});
  Classifier last(c, {2, 2, false, true});

  // Who holds what.
  EXPECT_TRUE(first.store.contains("embedding.word_embeddings.weight"));
  EXPECT_TRUE(first.store.contains("layers.1.mlp.dense_4h_to_h.weight"));
  EXPECT_FALSE(first.store.contains("layers.2.mlp.dense_4h_to_h.weight"));
  EXPECT_FALSE(first.store.contains("pooler.dense.weight"));
  EXPECT_FALSE(first.store.contains(head + ".weight"));
  EXPECT_FALSE(last.store.contains("embedding.word_embeddings.weight"));
  EXPECT_TRUE(last.store.contains("layers.3.mlp.dense_4h_to_h.weight"));
  EXPECT_TRUE(last.store.contains("pooler.dense.weight"));
  EXPECT_TRUE(last.store.contains(head + ".weight"));
  EXPECT_EQ(last.store.contains("final_layernorm.weight"), !post_ln);
  EXPECT_EQ(first.store.params().size() + last.store.params().size(), whole.store.params().size());
  for (Classifier* stage : {&first, &last})
    for (const Parameter& p : stage->store.params()) {
      EXPECT_EQ(p.spec.stage_tie, StageTie::kNone) << p.spec.name;
      EXPECT_TRUE(bitwise_equal(p.value, whole.store.get(p.spec.name).value)) << p.spec.name;
    }

  const int64_t samples = multiple_choice ? 2 : 3;
  const ClassifierBatch b = make_batch(c, samples);

  // Training: loss, logits and gradients, dropout on.
  const float want_loss = whole.model.forward_backward(b, 0.5f, 77);
  auto whole_ctx = whole.model.make_stage_ctx();  // the whole model is a first and last stage
  EXPECT_FALSE(whole.model.forward_stage(*whole_ctx, b, Tensor(), true, 77).defined());
  const Tensor want_train_logits = to_host(whole.model.stage_output(*whole_ctx).logits);
  EXPECT_EQ(whole.model.stage_output(*whole_ctx).loss, want_loss);

  auto first_ctx = first.model.make_stage_ctx();
  auto last_ctx = last.model.make_stage_ctx();
  const Tensor hidden = first.model.forward_stage(*first_ctx, b, Tensor(), true, 77);
  EXPECT_EQ(hidden.shape(), first.model.stage_activation_shape(samples));
  EXPECT_EQ(hidden.shape(), Shape({c.bert.seq_length, b.tokens.size(0), c.bert.hidden_size}));
  EXPECT_FALSE(last.model.forward_stage(*last_ctx, b, hidden, true, 77).defined());
  const ClassifierOutput& out = last.model.stage_output(*last_ctx);
  EXPECT_EQ(out.loss, want_loss);
  EXPECT_GT(want_loss, 0.0f);
  EXPECT_TRUE(bitwise_equal(to_host(out.logits), want_train_logits));
  EXPECT_EQ(out.logits.shape(), Shape({samples, c.classes}));
  EXPECT_EQ(to_host(out.labels).to_vector<int32_t>(), b.labels.to_vector<int32_t>());
  const Tensor grad = last.model.backward_stage(*last_ctx, Tensor(), 0.5f);
  EXPECT_EQ(grad.shape(), hidden.shape());
  EXPECT_FALSE(first.model.backward_stage(*first_ctx, grad, 0.5f).defined());

  for (Classifier* stage : {&first, &last})
    for (const Parameter& p : stage->store.params())
      EXPECT_TRUE(bitwise_equal(p.grad, whole.store.get(p.spec.name).grad)) << p.spec.name;
  // The comparison must be able to fail: gradients reach the head and the first stage.
  EXPECT_TRUE(any_nonzero(whole.store.get(head + ".weight").grad));
  EXPECT_TRUE(any_nonzero(whole.store.get("embedding.word_embeddings.weight").grad));
  EXPECT_TRUE(any_nonzero(whole.store.get("layers.0.self_attention.query_key_value.weight").grad));

  // Evaluation: no dropout; forward_logits is the whole classifier's.
  const Tensor want_logits = whole.model.forward_logits(b);
  EXPECT_FALSE(bitwise_equal(want_logits, want_train_logits)) << "dropout changed nothing";
  const Tensor eval_hidden = first.model.forward_stage(*first_ctx, b, Tensor(), false, 0);
  last.model.forward_stage(*last_ctx, b, eval_hidden, false, 0);
  EXPECT_TRUE(bitwise_equal(to_host(last.model.stage_output(*last_ctx).logits), want_logits));
}

TEST(BertClassifierStages, MultipleChoicePreLnStagesComputeTheWholeClassifier) {
  expect_stages_compute_the_whole_classifier(false, true);
}

TEST(BertClassifierStages, MultipleChoicePostLnStagesComputeTheWholeClassifier) {
  expect_stages_compute_the_whole_classifier(true, true);
}

TEST(BertClassifierStages, ClassificationPreLnStagesComputeTheWholeClassifier) {
  expect_stages_compute_the_whole_classifier(false, false);
}

TEST(BertClassifierStages, ClassificationPostLnStagesComputeTheWholeClassifier) {
  expect_stages_compute_the_whole_classifier(true, false);
}

TEST(BertClassifierStages, WholeModelCallsOnAStageNameTheStage) {
  const BertClassifierConfig c = config(false, false);
  Classifier last(c, {2, 2, false, true});
  try {
    last.model.forward_logits(make_batch(c, 1));
    FAIL() << "forward_logits ran on a stage";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("holds one pipeline stage, not the whole model"));
  }
}

TEST(BertClassifierStages, BackwardWithoutLabelsIsAnError) {
  const BertClassifierConfig c = config(false, false);
  Classifier whole(c, {});
  ClassifierBatch b = make_batch(c, 2);
  b.labels = Tensor();
  auto ctx = whole.model.make_stage_ctx();
  whole.model.forward_stage(*ctx, b, Tensor(), true, 1);
  EXPECT_FALSE(whole.model.stage_output(*ctx).labels.defined());
  EXPECT_EQ(whole.model.stage_output(*ctx).loss, 0.0f);
  try {
    whole.model.backward_stage(*ctx, Tensor(), 1.0f);
    FAIL() << "backward ran without labels";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("had no labels"));
  }
}

}  // namespace
}  // namespace megatron
