// BertModel (TP = 1) against the naive double reference in bert_reference.h: losses with
// dropout on in both LayerNorm orders, every parameter's gradient against central finite
// differences of the reference, the padding mask's isolation of padded positions, the model
// without a binary head, and bad-input errors.
#include <gtest/gtest.h>

#include <cmath>

#include "bert_test_util.h"
#include "model_test_util.h"

namespace megatron {
namespace {

using test::RefBertInput;

constexpr int64_t kBatch = 3, kVocab = 37, kPaddedVocab = 40;
constexpr uint64_t kSeed = 2024;

struct Fixture {
  BertConfig config;
  ParallelState ps = test::solo_parallel_state();
  ParameterStore store{0, 1};
  std::unique_ptr<BertModel> model;

  explicit Fixture(BertConfig c) : config(c) {
    model = std::make_unique<BertModel>(config, ps, store);
    store.allocate();
    model->init_weights(kSeed);
    test::randomize_parameters(store, 11, 0.3);
    model->refresh_compute_weights();
  }
  test::RefDropout dropout(const BertBatch& batch) const {
    return {true,
            kSeed,
            batch.iteration,
            batch.first_sample,
            config.hidden_dropout,
            config.attention_dropout};
  }
};

void expect_losses_match_reference(bool post_ln) {
  Fixture f(test::tiny_bert_config(post_ln, kVocab, kPaddedVocab));
  const int64_t s = f.config.seq_length;
  RefBertInput in = test::make_bert_input(kBatch, s, kVocab, 1);
  BertBatch batch = test::to_bert_batch(in, kBatch, s);
  BertLosses got = f.model->forward_backward(batch, 1.0f, kSeed);
  test::RefBertLosses want =
      test::ref_bert_losses(test::ref_bert_of(f.config, kBatch),
                            test::ref_params_from_store(f.store), in, f.dropout(batch));
  EXPECT_NEAR(got.lm, want.lm, 1e-5 * std::fabs(want.lm));
  EXPECT_NEAR(got.sop, want.sop, 1e-5 * std::fabs(want.sop));
  // Evaluation has no dropout: compare with the reference without dropout.
  BertLosses eval = f.model->forward_loss(batch);
  test::RefBertLosses want_eval = test::ref_bert_losses(
      test::ref_bert_of(f.config, kBatch), test::ref_params_from_store(f.store), in, {});
  EXPECT_NEAR(eval.lm, want_eval.lm, 1e-5 * std::fabs(want_eval.lm));
  EXPECT_NEAR(eval.sop, want_eval.sop, 1e-5 * std::fabs(want_eval.sop));
}

TEST(BertModel, PreLnLossesMatchDoubleReference) {
  expect_losses_match_reference(false);
}
TEST(BertModel, PostLnLossesMatchDoubleReference) {
  expect_losses_match_reference(true);
}

// d(lm + sop)/dθ of every parameter against finite differences of the reference, on a
// deterministic subset of elements per parameter (all of the small ones).
void expect_gradients_match_finite_differences(bool post_ln) {
  Fixture f(test::tiny_bert_config(post_ln, kVocab, kPaddedVocab));
  const int64_t s = f.config.seq_length;
  RefBertInput in = test::make_bert_input(kBatch, s, kVocab, 2);
  BertBatch batch = test::to_bert_batch(in, kBatch, s);
  f.store.zero_grads();
  f.model->forward_backward(batch, 1.0f, kSeed);
  test::RefParams ref = test::ref_params_from_store(f.store);
  const test::RefBert m = test::ref_bert_of(f.config, kBatch);
  const test::RefDropout drop = f.dropout(batch);
  for (const Parameter& p : f.store.params()) {
    std::vector<double>& values = ref.at(p.spec.name);
    const float* grad = p.grad.data<float>();
    const int64_t n = p.value.numel(), step = std::max<int64_t>(1, n / 6);
    std::vector<double> got, fd;
    for (int64_t i = 0; i < n; i += step) {
      const double keep = values[size_t(i)], eps = 1e-5;
      values[size_t(i)] = keep + eps;
      test::RefBertLosses up = test::ref_bert_losses(m, ref, in, drop);
      values[size_t(i)] = keep - eps;
      test::RefBertLosses down = test::ref_bert_losses(m, ref, in, drop);
      values[size_t(i)] = keep;
      got.push_back(grad[i]);
      fd.push_back(((up.lm + up.sop) - (down.lm + down.sop)) / (2 * eps));
    }
    double fd_norm = 0;
    for (double v : fd) fd_norm += v * v;
    if (std::sqrt(fd_norm) < 1e-6) {  // e.g. padded vocabulary rows: no gradient at all
      for (double g : got) EXPECT_LT(std::fabs(g), 1e-6) << p.spec.name;
      continue;
    }
    EXPECT_LT(test::relative_error(got, fd), 1e-3) << p.spec.name;
  }
}

TEST(BertModel, PreLnGradientsMatchFiniteDifferences) {
  expect_gradients_match_finite_differences(false);
}
TEST(BertModel, PostLnGradientsMatchFiniteDifferences) {
  expect_gradients_match_finite_differences(true);
}

// Changing the tokens and token types at padded positions changes nothing at the others.
TEST(BertModel, PaddedPositionsDoNotAffectOtherPositions) {
  Fixture f(test::tiny_bert_config(false, kVocab, kPaddedVocab));
  const int64_t s = f.config.seq_length;
  RefBertInput in = test::make_bert_input(kBatch, s, kVocab, 3);
  BertBatch a = test::to_bert_batch(in, kBatch, s);
  BertOutputs out_a = f.model->forward_logits(a.tokens, a.token_types, a.pad_mask);
  RefBertInput changed = in;
  for (size_t i = 0; i < changed.pad.size(); ++i)
    if (changed.pad[i]) {
      changed.tokens[i] = int((i * 7) % kVocab);
      changed.types[i] = 1;
    }
  BertBatch b = test::to_bert_batch(changed, kBatch, s);
  BertOutputs out_b = f.model->forward_logits(b.tokens, b.token_types, b.pad_mask);
  const float* la = out_a.mlm_logits.data<float>();
  const float* lb = out_b.mlm_logits.data<float>();
  int64_t compared = 0, padded_differs = 0;
  for (int64_t r = 0; r < kBatch; ++r)
    for (int64_t pos = 0; pos < s; ++pos)
      for (int64_t v = 0; v < kVocab; ++v) {
        const int64_t i = (r * s + pos) * kVocab + v;
        if (in.pad[size_t(r * s + pos)]) {
          padded_differs += la[i] != lb[i];
          continue;
        }
        EXPECT_EQ(la[i], lb[i]) << "sample " << r << " position " << pos;
        ++compared;
      }
  EXPECT_GT(compared, 0);
  EXPECT_GT(padded_differs, 0);  // the change did reach the padded positions themselves
  for (int64_t i = 0; i < kBatch * 2; ++i)
    EXPECT_EQ(out_a.sop_logits.data<float>()[i], out_b.sop_logits.data<float>()[i]);
}

TEST(BertModel, WithoutBinaryHeadHasNoPoolerAndNoSopLoss) {
  BertConfig c = test::tiny_bert_config(false, kVocab, kPaddedVocab);
  c.binary_head = false;
  Fixture f(c);
  EXPECT_FALSE(f.store.contains("pooler.dense.weight"));
  EXPECT_FALSE(f.store.contains("binary_head.weight"));
  RefBertInput in = test::make_bert_input(kBatch, c.seq_length, kVocab, 4);
  BertBatch batch = test::to_bert_batch(in, kBatch, c.seq_length);
  BertLosses got = f.model->forward_backward(batch, 1.0f, kSeed);
  test::RefBertLosses want = test::ref_bert_losses(
      test::ref_bert_of(c, kBatch), test::ref_params_from_store(f.store), in, f.dropout(batch));
  EXPECT_EQ(got.sop, 0.0f);
  EXPECT_NEAR(got.lm, want.lm, 1e-5 * std::fabs(want.lm));
}

TEST(BertModel, BadInputsAreErrors) {
  Fixture f(test::tiny_bert_config(false, kVocab, kPaddedVocab));
  const int64_t s = f.config.seq_length;
  RefBertInput in = test::make_bert_input(kBatch, s, kVocab, 5);
  RefBertInput bad_label = in;
  bad_label.labels[1] = int(kVocab);  // position 1 is masked
  EXPECT_THROW(f.model->forward_loss(test::to_bert_batch(bad_label, kBatch, s)), Error);
  RefBertInput bad_type = in;
  bad_type.types[0] = 2;
  EXPECT_THROW(f.model->forward_loss(test::to_bert_batch(bad_type, kBatch, s)), Error);
  RefBertInput bad_sop = in;
  bad_sop.sop[0] = 3;
  EXPECT_THROW(f.model->forward_loss(test::to_bert_batch(bad_sop, kBatch, s)), Error);
  BertConfig c = test::tiny_bert_config(true, kVocab, kPaddedVocab);
  c.apply_residual_connection_post_layernorm = true;  // pre-LN only
  EXPECT_THROW(Fixture{c}, Error);
}

}  // namespace
}  // namespace megatron
