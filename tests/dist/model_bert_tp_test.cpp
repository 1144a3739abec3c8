// The whole BERT at TP = world size (1, 2, 4) against the TP = 1 model built in the same
// process (SoloCommunicator) from the same weights: 2 layers, h = 32, 4 heads, vocabulary
// 1000 (same padded size for both), s = 16, b = 3 with padding, dropout 0.1 on, both
// LayerNorm orders, full or selective recompute or sequence parallelism (TP run only; its
// LayerNorm and bias gradients summed over TP as the trainer does). The MLM and SOP losses, the
// full logits and every gathered gradient must agree (relative ≤ 1e-5).
#include <gtest/gtest.h>

#include "../unit/bert_test_util.h"
#include "optim/grad_reduction.h"
#include "tp_test_util.h"

namespace megatron {
namespace {

BertConfig bert_config(bool post_ln, bool recompute) {
  BertConfig c = test::tiny_bert_config(post_ln, 1000, 1024);
  c.hidden_size = 32;
  c.seq_length = 16;
  c.max_position_embeddings = 20;
  c.recompute_activations = recompute;
  return c;
}

void check_bert_matches_tp1(bool post_ln, bool recompute, bool selective = false,
                            bool sequence_parallel = false, bool flash = false) {
  const BertConfig c = bert_config(post_ln, recompute);
  BertConfig tp_config = c;
  tp_config.selective_recompute = selective;
  tp_config.sequence_parallel = sequence_parallel;
  tp_config.flash_attention = flash;
  const int64_t b = 3, s = c.seq_length;
  ParallelState tp = test::tp_world_state(), dense = test::dense_state();
  ParameterStore tp_store(tp.tp_rank, tp.tp_size), dense_store(0, 1);
  BertModel tp_model(tp_config, tp, tp_store), dense_model(c, dense, dense_store);
  tp_store.allocate();
  dense_store.allocate();
  // Random values everywhere (biases, LayerNorms, the MLM bias) so that every parameter's
  // sharding is exercised, not only the initialised weights.
  test::copy_dense_into_shards(dense_store, tp_store, 31, 0.3);
  tp_model.refresh_compute_weights();
  dense_model.refresh_compute_weights();

  const BertBatch batch = test::to_bert_batch(test::make_bert_input(b, s, c.vocab_size, 9), b, s);
  const BertLosses tp_loss = tp_model.forward_backward(batch, 1.0f, 2024);
  reduce_sequence_parallel_gradients(tp_store, tp);
  const BertLosses dense_loss = dense_model.forward_backward(batch, 1.0f, 2024);
  const BertLosses tp_eval = tp_model.forward_loss(batch);
  const BertLosses dense_eval = dense_model.forward_loss(batch);
  BertOutputs tp_out = tp_model.forward_logits(batch.tokens, batch.token_types, batch.pad_mask);
  BertOutputs dense_out =
      dense_model.forward_logits(batch.tokens, batch.token_types, batch.pad_mask);

  EXPECT_NEAR(tp_loss.lm, dense_loss.lm, 1e-5 * dense_loss.lm);
  EXPECT_NEAR(tp_loss.sop, dense_loss.sop, 1e-5 * dense_loss.sop);
  EXPECT_NEAR(tp_eval.lm, dense_eval.lm, 1e-5 * dense_eval.lm);
  EXPECT_NEAR(tp_eval.sop, dense_eval.sop, 1e-5 * dense_eval.sop);
  EXPECT_NE(tp_loss.lm, tp_eval.lm);  // dropout was on in training
  EXPECT_LE(test::rel_error(tp_out.mlm_logits, dense_out.mlm_logits), 1e-5);
  EXPECT_LE(test::rel_error(tp_out.sop_logits, dense_out.sop_logits), 1e-5);
  test::expect_grads_match_dense(*tp.tp, tp_store, dense_store, 1e-5);
}

TEST(BertTensorParallelTest, PreLnLossesAndGradientsEqualTp1) {
  check_bert_matches_tp1(false, false);
}
TEST(BertTensorParallelTest, PostLnLossesAndGradientsEqualTp1) {
  check_bert_matches_tp1(true, false);
}
TEST(BertTensorParallelTest, WithRecomputeLossesAndGradientsEqualTp1) {
  check_bert_matches_tp1(false, true);
}
TEST(BertTensorParallelTest, WithSelectiveRecomputeLossesAndGradientsEqualTp1) {
  check_bert_matches_tp1(true, false, true);  // padding masks recomputed with the core
}

TEST(BertTensorParallelTest, WithFlashAttentionLossesAndGradientsEqualTp1) {
  // The fused attention at TP = world size against the unfused TP = 1 model: padding masks.
  check_bert_matches_tp1(false, false, false, false, true);
  check_bert_matches_tp1(true, true, false, false, true);  // post-LN, full recompute
}

TEST(BertTensorParallelTest, WithSequenceParallelismLossesAndGradientsEqualTp1) {
  if (test::world_size() == 1) GTEST_SKIP() << "sequence parallelism needs TP > 1";
  for (bool post_ln : {false, true}) {  // post-LN: the embedding LayerNorm before the shards
    for (bool recompute : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "post-LN " << post_ln << " recompute " << recompute);
      check_bert_matches_tp1(post_ln, recompute, false, true);
    }
  }
}

}  // namespace
}  // namespace megatron
