// BertModel as pipeline stages (StageRange), as model_gpt_stage_test.cpp does for GPT: a 4-layer
// BERT cut into 2 stages of 2 layers, run by hand (stage 0's output fed to stage 1, stage 1's input
// gradient back to stage 0), computes what the whole model computes — the same initial weights
// (init keyed by name), the same lm and sop losses bit for bit with dropout on, the same
// gradients bit for bit for every parameter held once, and for the tied word embedding
// gradients whose sum over the two stages is the whole model's — in both LayerNorm orders.
// Also: which stage holds what, and the error for a whole-model call on a stage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "bert_test_util.h"
#include "core/error.h"
#include "model_test_util.h"
#include "stage_test_util.h"

namespace megatron {
namespace {

constexpr int64_t kBatch = 3, kVocab = 37, kPaddedVocab = 40;
const std::string kWord = "embedding.word_embeddings.weight";

BertConfig config(bool post_ln) {
  BertConfig c = test::tiny_bert_config(post_ln, kVocab, kPaddedVocab);
  c.num_layers = 4;
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.3f;
  return c;
}

struct Model {
  Model(const BertConfig& c, StageRange range)
      : ps(test::solo_parallel_state()), store(0, 1), model(c, ps, store, range) {
    store.allocate();
    model.init_weights(31);
  }
  ParallelState ps;
  ParameterStore store;
  BertModel model;
};

using test::bitwise_equal;

void expect_stages_compute_the_whole_model(bool post_ln) {
  const BertConfig c = config(post_ln);
  Model whole(c, {});
  Model first(c, {0, 2, true, false});
  Model last(c, {2, 2, false, true});

  // Who holds what.
  EXPECT_TRUE(first.store.contains("embedding.tokentype_embeddings.weight"));
  EXPECT_TRUE(first.store.contains("layers.1.mlp.dense_4h_to_h.weight"));
  EXPECT_FALSE(first.store.contains("layers.2.mlp.dense_4h_to_h.weight"));
  EXPECT_FALSE(first.store.contains("pooler.dense.weight"));
  EXPECT_FALSE(first.store.contains("lm_head.bias"));
  EXPECT_FALSE(first.store.contains("binary_head.weight"));
  EXPECT_FALSE(last.store.contains("embedding.position_embeddings.weight"));
  EXPECT_TRUE(last.store.contains("layers.3.mlp.dense_4h_to_h.weight"));
  EXPECT_TRUE(last.store.contains("pooler.dense.weight"));
  EXPECT_TRUE(last.store.contains("lm_head.bias"));
  EXPECT_TRUE(last.store.contains("binary_head.weight"));
  EXPECT_EQ(last.store.contains("final_layernorm.weight"), !post_ln);
  EXPECT_EQ(first.store.get(kWord).spec.stage_tie, StageTie::kOriginal);
  EXPECT_EQ(last.store.get(kWord).spec.stage_tie, StageTie::kCopy);
  EXPECT_EQ(whole.store.get(kWord).spec.stage_tie, StageTie::kNone);
  EXPECT_EQ(first.store.params().size() + last.store.params().size(),
            whole.store.params().size() + 1);  // + the tied copy

  for (Model* stage : {&first, &last})
    for (const Parameter& p : stage->store.params())
      EXPECT_TRUE(bitwise_equal(p.value, whole.store.get(p.spec.name).value)) << p.spec.name;

  const BertBatch b = test::to_bert_batch(test::make_bert_input(kBatch, c.seq_length, kVocab, 5),
                                          kBatch, c.seq_length);
  const BertLosses want = whole.model.forward_backward(b, 0.5f, 77);
  auto first_ctx = first.model.make_stage_ctx();
  auto last_ctx = last.model.make_stage_ctx();
  const Tensor hidden = first.model.forward_stage(*first_ctx, b, Tensor(), true, 77);
  EXPECT_EQ(hidden.shape(), first.model.stage_activation_shape(kBatch));
  EXPECT_FALSE(last.model.forward_stage(*last_ctx, b, hidden, true, 77).defined());
  EXPECT_EQ(last.model.stage_losses(*last_ctx).lm, want.lm);
  EXPECT_EQ(last.model.stage_losses(*last_ctx).sop, want.sop);
  EXPECT_GT(want.sop, 0.0f);
  const Tensor grad = last.model.backward_stage(*last_ctx, Tensor(), 0.5f);
  EXPECT_EQ(grad.shape(), hidden.shape());
  EXPECT_FALSE(first.model.backward_stage(*first_ctx, grad, 0.5f).defined());

  test::expect_stage_gradients_are_the_whole_models(first.store, last.store, whole.store, kWord);
}

TEST(BertStages, PreLnStagesComputeWhatTheWholeModelComputes) {
  expect_stages_compute_the_whole_model(false);
}

TEST(BertStages, PostLnStagesComputeWhatTheWholeModelComputes) {
  expect_stages_compute_the_whole_model(true);
}

TEST(BertStages, WholeModelCallsOnAStageNameTheStage) {
  const BertConfig c = config(false);
  Model last(c, {2, 2, false, true});
  const BertBatch b =
      test::to_bert_batch(test::make_bert_input(1, c.seq_length, kVocab, 5), 1, c.seq_length);
  try {
    last.model.forward_loss(b);
    FAIL() << "forward_loss ran on a stage";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("holds one pipeline stage, not the whole model"));
  }
}

}  // namespace
}  // namespace megatron
