// The whole GPT at TP = world size (1, 2, 4) against the TP = 1 model built in the same
// process (SoloCommunicator) from the same seed: 2 layers, h = 64, 4 heads, the GPT-2
// vocabulary 50257 (same padded size for both), s = 32, b = 2, dropout 0.1 on. The loss and
// every gathered gradient must agree (relative ≤ 1e-5): TP-invariant init and TP-invariant
// dropout make the two runs compute the same function. So must the TP run with sequence
// parallelism (its LayerNorm and bias gradients summed over TP as the trainer does), with full
// or selective recompute, and with the fused attention (kernels/flash_attention.h: the same
// dropout mask, sums in another order).
#include <gtest/gtest.h>

#include "model/gpt_model.h"
#include "optim/grad_reduction.h"
#include "tp_test_util.h"

namespace megatron {
namespace {

GptConfig gpt_config(bool recompute = false) {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.vocab_size = 50257;
  c.padded_vocab_size = padded_vocab_size(50257, 128, 4);  // one padding for every TP size
  c.max_position_embeddings = 64;
  c.seq_length = 32;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.recompute_activations = recompute;
  return c;
}

GptBatch gpt_batch(const GptConfig& c, int64_t b, int64_t first_sample) {
  const int64_t s = c.seq_length;
  std::vector<int32_t> tokens(b * s), labels(b * s);
  std::vector<float> mask(b * s);
  for (int64_t i = 0; i < b * s; ++i) {
    tokens[i] = int32_t((i * 7919 + 13) % c.vocab_size);
    labels[i] = int32_t((i * 104729 + 7) % c.vocab_size);
    mask[i] = i % 7 == 3 ? 0.0f : 1.0f;
  }
  labels[1] = int32_t(c.vocab_size - 1);
  return {Tensor::from_vector(tokens, {b, s}), Tensor::from_vector(labels, {b, s}),
          Tensor::from_vector(mask, {b, s}), first_sample, /*iteration=*/3};
}

// `tp_config` runs at TP = world size, `c` at TP = 1 (they differ in options that must not
// change the function: recompute, sequence parallelism).
void check_gpt_matches_tp1(const GptConfig& c, const GptConfig& tp_config) {
  ParallelState tp = test::tp_world_state(), dense = test::dense_state();
  ParameterStore tp_store(tp.tp_rank, tp.tp_size), dense_store(0, 1);
  GptModel tp_model(tp_config, tp, tp_store), dense_model(c, dense, dense_store);
  tp_store.allocate();
  dense_store.allocate();
  tp_model.init_weights(17);
  dense_model.init_weights(17);

  const GptBatch batch = gpt_batch(c, 2, 6);
  const float tp_loss = tp_model.forward_backward(batch, 1.0f, 2024);
  reduce_sequence_parallel_gradients(tp_store, tp);
  const float dense_loss = dense_model.forward_backward(batch, 1.0f, 2024);
  const float tp_eval = tp_model.forward_loss(batch);
  const float dense_eval = dense_model.forward_loss(batch);
  // Logits are gathered over TP inside forward_logits (a collective: every rank calls it).
  Tensor tp_logits = tp_model.forward_logits(batch.tokens);
  Tensor dense_logits = dense_model.forward_logits(batch.tokens);

  EXPECT_NEAR(tp_loss, dense_loss, 1e-5 * dense_loss);
  EXPECT_NEAR(tp_eval, dense_eval, 1e-5 * dense_eval);
  EXPECT_NE(tp_loss, tp_eval);  // dropout was on in training
  EXPECT_LE(test::rel_error(tp_logits, dense_logits), 1e-5);
  test::expect_grads_match_dense(*tp.tp, tp_store, dense_store, 1e-5);
}

TEST(GptTensorParallelTest, LossAndGradientsEqualTp1) {
  check_gpt_matches_tp1(gpt_config(), gpt_config());
}

TEST(GptTensorParallelTest, WithRecomputeLossAndGradientsEqualTp1) {
  check_gpt_matches_tp1(gpt_config(true), gpt_config(true));
}

TEST(GptTensorParallelTest, WithSelectiveRecomputeLossAndGradientsEqualTp1) {
  GptConfig selective = gpt_config();
  selective.selective_recompute = true;
  check_gpt_matches_tp1(gpt_config(), selective);
}

TEST(GptTensorParallelTest, WithFlashAttentionLossAndGradientsEqualTp1) {
  for (bool full : {false, true})
    for (bool sequence_parallel : {false, true}) {
      if (sequence_parallel && test::world_size() == 1) continue;
      SCOPED_TRACE(::testing::Message()
                   << "full recompute " << full << " SP " << sequence_parallel);
      GptConfig flash = gpt_config(full);
      flash.flash_attention = true;
      flash.sequence_parallel = sequence_parallel;
      check_gpt_matches_tp1(gpt_config(), flash);
    }
}

TEST(GptTensorParallelTest, WithSequenceParallelismLossAndGradientsEqualTp1) {
  if (test::world_size() == 1) GTEST_SKIP() << "sequence parallelism needs TP > 1";
  for (bool full : {false, true}) {
    for (bool selective : {false, true}) {
      if (full && selective) continue;
      SCOPED_TRACE(::testing::Message() << "full recompute " << full << " selective " << selective);
      GptConfig sp = gpt_config(full);
      sp.selective_recompute = selective;
      sp.sequence_parallel = true;
      check_gpt_matches_tp1(gpt_config(), sp);
    }
  }
}

// The sequence-parallel parameters are exactly the replicated ones the shards feed: the
// LayerNorms and the row-parallel biases; at TP = 1 the option is refused.
TEST(GptTensorParallelTest, SequenceParallelMarksLayerNormsAndRowParallelBiases) {
  if (test::world_size() == 1) {
    GptConfig sp = gpt_config();
    sp.sequence_parallel = true;
    ParameterStore store(0, 1);
    EXPECT_THROW(GptModel(sp, test::dense_state(), store), Error);
    return;
  }
  GptConfig sp = gpt_config();
  sp.sequence_parallel = true;
  ParallelState tp = test::tp_world_state();
  ParameterStore store(tp.tp_rank, tp.tp_size);
  GptModel model(sp, tp, store);
  int marked = 0;
  for (const Parameter& p : store.params()) {
    const std::string& n = p.spec.name;
    const bool expected = n.find("layernorm") != std::string::npos ||
                          (p.replicated() && n.find("dense") != std::string::npos &&
                           n.find(".bias") != std::string::npos);
    EXPECT_EQ(p.spec.sequence_parallel, expected) << n;
    marked += p.spec.sequence_parallel;
  }
  // 2 layers x (2 LayerNorms x 2 + 2 biases) + the final LayerNorm's 2.
  EXPECT_EQ(marked, 2 * 6 + 2);
}

// bf16 compute at TP = world (bf16 GEMM outputs, bf16 all-reduces of partial sums) against
// f32 at TP = 1. bf16 has a relative precision of 2^-8 ≈ 3.9e-3: the loss (statistics in f32)
// agrees to 1e-3 relative, every gradient to 2e-2 (measured: ≤ 6e-6 and ≤ 9e-3).
TEST(GptTensorParallelTest, Bf16TracksF32Tp1) {
  const GptConfig c = gpt_config(false);
  GptConfig bf = c;
  bf.compute_dtype = DType::BF16;
  ParallelState tp = test::tp_world_state(), dense = test::dense_state();
  ParameterStore tp_store(tp.tp_rank, tp.tp_size), dense_store(0, 1);
  GptModel tp_model(bf, tp, tp_store), dense_model(c, dense, dense_store);
  tp_store.allocate();
  dense_store.allocate();
  tp_model.init_weights(17);
  dense_model.init_weights(17);
  const GptBatch batch = gpt_batch(c, 2, 0);
  const float tp_loss = tp_model.forward_backward(batch, 1.0f, 5);
  const float dense_loss = dense_model.forward_backward(batch, 1.0f, 5);
  EXPECT_NEAR(tp_loss, dense_loss, 1e-3 * dense_loss);
  test::expect_grads_match_dense(*tp.tp, tp_store, dense_store, 2e-2);
}

}  // namespace
}  // namespace megatron
