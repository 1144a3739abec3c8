// GptModel as pipeline stages (StageRange): a 4-layer GPT cut into 2 stages of 2 layers, run by
// hand (stage 0's output fed to stage 1, stage 1's input gradient back to stage 0), computes
// what the whole model computes — the same initial weights (init keyed by name), the same loss
// bit for bit with dropout on, the same gradients bit for bit for every parameter held once,
// and for the tied word embedding gradients whose sum over the two stages is the whole model's.
// Also: which stage holds what, and the errors for whole-model calls on a stage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "model/gpt_model.h"
#include "model_test_util.h"
#include "stage_test_util.h"

namespace megatron {
namespace {

GptConfig config() {
  GptConfig c;
  c.num_layers = 4;
  c.hidden_size = 8;
  c.num_attention_heads = 2;
  c.ffn_hidden_size = 12;
  c.vocab_size = 37;
  c.padded_vocab_size = 40;
  c.max_position_embeddings = 8;
  c.seq_length = 6;
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.3f;
  return c;
}

GptBatch batch(const GptConfig& c, int64_t b) {
  const int64_t s = c.seq_length;
  std::vector<int32_t> tokens(b * s), labels(b * s);
  std::vector<float> mask(b * s);
  for (int64_t i = 0; i < b * s; ++i) {
    tokens[i] = int32_t((i * 7 + 3) % c.vocab_size);
    labels[i] = int32_t((i * 11 + 5) % c.vocab_size);
    mask[i] = (i % 5 == 2) ? 0.0f : 1.0f;
  }
  return {Tensor::from_vector(tokens, {b, s}), Tensor::from_vector(labels, {b, s}),
          Tensor::from_vector(mask, {b, s}), 4, 9};
}

struct Model {
  Model(const GptConfig& c, StageRange range)
      : ps(test::solo_parallel_state()), store(0, 1), model(c, ps, store, range) {
    store.allocate();
    model.init_weights(31);
  }
  ParallelState ps;
  ParameterStore store;
  GptModel model;
};

using test::bitwise_equal;

TEST(GptStages, TwoStagesComputeWhatTheWholeModelComputes) {
  const GptConfig c = config();
  Model whole(c, {});
  Model first(c, {0, 2, true, false});
  Model last(c, {2, 2, false, true});
  const std::string word = "embedding.word_embeddings.weight";

  // Who holds what.
  EXPECT_TRUE(first.store.contains("embedding.position_embeddings.weight"));
  EXPECT_TRUE(first.store.contains("layers.1.mlp.dense_4h_to_h.weight"));
  EXPECT_FALSE(first.store.contains("layers.2.mlp.dense_4h_to_h.weight"));
  EXPECT_FALSE(first.store.contains("final_layernorm.weight"));
  EXPECT_FALSE(last.store.contains("embedding.position_embeddings.weight"));
  EXPECT_TRUE(last.store.contains("layers.3.input_layernorm.weight"));
  EXPECT_TRUE(last.store.contains("final_layernorm.weight"));
  EXPECT_EQ(first.store.get(word).spec.stage_tie, StageTie::kOriginal);
  EXPECT_EQ(last.store.get(word).spec.stage_tie, StageTie::kCopy);
  EXPECT_EQ(whole.store.get(word).spec.stage_tie, StageTie::kNone);
  EXPECT_EQ(first.store.params().size() + last.store.params().size(),
            whole.store.params().size() + 1);  // + the tied copy

  // Same initial values, parameter by parameter (the copy included).
  for (Model* stage : {&first, &last})
    for (const Parameter& p : stage->store.params())
      EXPECT_TRUE(bitwise_equal(p.value, whole.store.get(p.spec.name).value)) << p.spec.name;

  const GptBatch b = batch(c, 3);
  const float whole_loss = whole.model.forward_backward(b, 0.5f, 77);
  auto first_ctx = first.model.make_stage_ctx();
  auto last_ctx = last.model.make_stage_ctx();
  const Tensor hidden = first.model.forward_stage(*first_ctx, b, Tensor(), true, 77);
  EXPECT_EQ(hidden.shape(), first.model.stage_activation_shape(3));
  EXPECT_FALSE(last.model.forward_stage(*last_ctx, b, hidden, true, 77).defined());
  EXPECT_EQ(last.model.stage_loss(*last_ctx), whole_loss);
  const Tensor grad = last.model.backward_stage(*last_ctx, Tensor(), 0.5f);
  EXPECT_EQ(grad.shape(), hidden.shape());
  EXPECT_FALSE(first.model.backward_stage(*first_ctx, grad, 0.5f).defined());

  test::expect_stage_gradients_are_the_whole_models(first.store, last.store, whole.store, word);
}

// Llama options: RMSNorm, RoPE (no position embedding), SwiGLU, GQA (2 KV groups for 4 heads),
// no linear biases and an untied output layer. The output layer belongs to the last stage,
// as the head does, and there is no tied copy of the word embedding: every parameter is held
// by exactly one stage, and every gradient is the whole model's bit for bit.
TEST(GptStages, LlamaVariantStagesComputeWhatTheWholeModelComputes) {
  GptConfig c = config();
  c.num_attention_heads = 4;
  c.arch.normalization = Normalization::kRMSNorm;
  c.arch.position_embedding = PositionEmbedding::kRope;
  c.arch.swiglu = true;
  c.arch.num_query_groups = 2;
  c.arch.add_bias_linear = false;
  c.arch.untie_embeddings_and_output_weights = true;
  Model whole(c, {});
  Model first(c, {0, 2, true, false});
  Model last(c, {2, 2, false, true});
  const std::string word = "embedding.word_embeddings.weight";
  const std::string output = "output_layer.weight";

  EXPECT_TRUE(whole.store.contains(output));
  EXPECT_FALSE(first.store.contains(output));
  EXPECT_TRUE(last.store.contains(output));
  EXPECT_TRUE(first.store.contains(word));
  EXPECT_FALSE(last.store.contains(word));
  EXPECT_FALSE(first.store.contains("embedding.position_embeddings.weight"));
  EXPECT_EQ(first.store.get(word).spec.stage_tie, StageTie::kNone);
  EXPECT_EQ(first.store.params().size() + last.store.params().size(), whole.store.params().size());

  for (Model* stage : {&first, &last})
    for (const Parameter& p : stage->store.params())
      EXPECT_TRUE(bitwise_equal(p.value, whole.store.get(p.spec.name).value)) << p.spec.name;

  const GptBatch b = batch(c, 3);
  const float whole_loss = whole.model.forward_backward(b, 0.5f, 77);
  auto first_ctx = first.model.make_stage_ctx();
  auto last_ctx = last.model.make_stage_ctx();
  const Tensor hidden = first.model.forward_stage(*first_ctx, b, Tensor(), true, 77);
  EXPECT_FALSE(last.model.forward_stage(*last_ctx, b, hidden, true, 77).defined());
  EXPECT_EQ(last.model.stage_loss(*last_ctx), whole_loss);
  const Tensor grad = last.model.backward_stage(*last_ctx, Tensor(), 0.5f);
  EXPECT_FALSE(first.model.backward_stage(*first_ctx, grad, 0.5f).defined());
  for (Model* stage : {&first, &last})
    for (const Parameter& p : stage->store.params())
      EXPECT_TRUE(bitwise_equal(p.grad, whole.store.get(p.spec.name).grad)) << p.spec.name;
}

TEST(GptStages, WholeModelCallsOnAStageNameTheStage) {
  const GptConfig c = config();
  Model last(c, {2, 2, false, true});
  try {
    last.model.forward_loss(batch(c, 1));
    FAIL() << "forward_loss ran on a stage";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("holds one pipeline stage, not the whole model"));
  }
  Model first(c, {0, 2, true, false});
  try {
    InferenceCtx ctx = first.model.make_inference_ctx(1, 4);
    first.model.forward_step(ctx, batch(c, 1).tokens);
    FAIL() << "inference ran on a stage";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("inference needs the whole GPT model"));
  }
}

}  // namespace
}  // namespace megatron
