// KV-cache inference and generation at TP = world size (1, 2, 4):
// - incremental decoding (a prefill, then one token per step) gives the logits of a full
//   forward at every position (relative error <= 1e-5, f32), at this TP and at TP = 1;
// - a batch of prompts of different lengths gives each sequence what it gets alone;
// - greedy, top-k, top-p and temperature sampling draw the same tokens at TP = t as at TP = 1
//   (same seed), on every rank;
// - the vocab-parallel sampler's top-k / top-p draws follow the filtered distribution of a
//   fixed logit vector (counts within 5 standard deviations), identically on every rank.
#include <gtest/gtest.h>

#include <cmath>

#include "model/gpt_model.h"
#include "parallel/mappings.h"
#include "parallel/vocab_parallel_sampling.h"
#include "tasks/generation.h"
#include "tp_test_util.h"

namespace megatron {
namespace {

GptConfig tiny_config() {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.vocab_size = 1000;
  c.padded_vocab_size = padded_vocab_size(1000, 128, 4);  // one padding for every TP size
  c.max_position_embeddings = 64;
  c.seq_length = 32;
  return c;
}

// A TP = world model and a TP = 1 model in this process with the same weights (random, larger
// than the init so that the next-token distributions are far from uniform).
struct Models {
  GptConfig config = tiny_config();
  ParallelState tp = test::tp_world_state(), dense = test::dense_state();
  ParameterStore tp_store{tp.tp_rank, tp.tp_size}, dense_store{0, 1};
  GptModel tp_model{config, tp, tp_store}, dense_model{config, dense, dense_store};
  Models() {
    tp_store.allocate();
    dense_store.allocate();
    test::copy_dense_into_shards(dense_store, tp_store, 5, 0.15);
    tp_model.refresh_compute_weights();
    dense_model.refresh_compute_weights();
  }
};

Tensor tokens_tensor(int64_t b, int64_t s, int64_t vocab) {
  std::vector<int32_t> t(size_t(b * s));
  for (int64_t i = 0; i < b * s; ++i) t[size_t(i)] = int32_t((i * 7919 + 13) % vocab);
  return Tensor::from_vector(t, {b, s});
}

// Incremental logits for tokens [b, s] (prefill of `prefill` positions, then one per step),
// gathered over TP and without padding: [b, s, V].
Tensor incremental_logits(GptModel& model, const Tensor& tokens, int64_t prefill) {
  const GptConfig& c = model.config();
  const int64_t b = tokens.size(0), s = tokens.size(1);
  InferenceCtx ctx = model.make_inference_ctx(b, s);
  Tensor out = Tensor::empty({b, s, c.vocab_size}, DType::F32);
  Arena arena;
  for (int64_t pos = 0; pos < s;) {
    const int64_t n = pos == 0 ? prefill : 1;
    Tensor local =
        model.forward_step(ctx, tokens.slice(1, pos, pos + n).clone(), true);  // [n, b, V/t]
    Tensor full = gather_last_dim(*model.parallel_state().tp, local, arena);   // [n, b, Vp]
    out.slice(1, pos, pos + n).copy_from(full.slice(2, 0, c.vocab_size).transpose(0, 1).clone());
    pos += n;
  }
  return out;
}

TEST(GptInferenceTest, IncrementalDecodingEqualsFullForward) {
  Models m;
  const Tensor tokens = tokens_tensor(3, 21, m.config.vocab_size);
  const Tensor full_tp = m.tp_model.forward_logits(tokens);
  const Tensor full_dense = m.dense_model.forward_logits(tokens);
  const Tensor inc_tp = incremental_logits(m.tp_model, tokens, 7);
  const Tensor inc_dense = incremental_logits(m.dense_model, tokens, 1);
  EXPECT_LE(test::rel_error(inc_tp, full_tp), 1e-5);
  EXPECT_LE(test::rel_error(inc_dense, full_dense), 1e-5);
  EXPECT_LE(test::rel_error(inc_tp, full_dense), 1e-5);
  // Position by position, so that no single step hides in the norm of the whole.
  for (int64_t pos : {0, 6, 7, 20}) {
    Tensor a = inc_tp.slice(1, pos, pos + 1).clone(), b = full_dense.slice(1, pos, pos + 1).clone();
    EXPECT_LE(test::rel_error(a, b), 1e-5) << "position " << pos;
  }
}

TEST(GptInferenceTest, LastPositionShardIsTheFullForwardsColumns) {
  Models m;
  const Tensor tokens = tokens_tensor(2, 9, m.config.vocab_size);
  InferenceCtx ctx = m.tp_model.make_inference_ctx(2, 9);
  Tensor last = m.tp_model.forward_step(ctx, tokens);  // [b, V/t]
  const int64_t vl = m.config.padded_vocab_size / m.tp.tp_size;
  ASSERT_EQ(last.shape(), (Shape{2, vl}));
  const Tensor full = m.dense_model.forward_logits(tokens);  // [b, s, V]
  const int64_t start = m.tp_model.vocab_start(),
                end = std::min<int64_t>(start + vl, m.config.vocab_size);
  if (end > start) {
    Tensor mine = last.slice(1, 0, end - start).clone();
    Tensor ref = full.select(1, 8).slice(1, start, end).clone();
    EXPECT_LE(test::rel_error(mine, ref), 1e-5);
  }
  EXPECT_EQ(ctx.length(), 9);
}

std::vector<std::vector<int32_t>> prompts() {
  return {{5, 17, 300}, {9, 1, 2, 3, 999, 4, 5, 6, 7}, {42, 43, 44, 45, 46}};
}

GenerationOptions options(int top_k, float top_p, float temperature, bool logprobs) {
  GenerationOptions o;
  o.tokens_to_generate = 8;
  o.sampling = {temperature, top_k, top_p, 1234};
  o.request = 3;
  o.logprobs = logprobs;
  o.stop_tokens = {999};
  o.pad_token = 0;
  return o;
}

TEST(GptGenerationTest, BatchedPromptsGetWhatTheyGetAlone) {
  Models m;
  const auto ps = prompts();
  const GenerationOptions o = options(1, 0.0f, 1.0f, true);
  const GenerationOutput batch = generate_tokens(m.tp_model, ps, o);
  for (size_t i = 0; i < ps.size(); ++i) {
    const GenerationOutput alone = generate_tokens(m.tp_model, {ps[i]}, o);
    EXPECT_EQ(batch.tokens[i], alone.tokens[0]) << "prompt " << i;
    ASSERT_EQ(batch.logprobs[i].size(), alone.logprobs[0].size());
    ASSERT_EQ(batch.logprobs[i].size(), batch.tokens[i].size() - 1);
    for (size_t j = 0; j < alone.logprobs[0].size(); ++j)
      EXPECT_NEAR(batch.logprobs[i][j], alone.logprobs[0][j], 1e-5 * std::abs(alone.logprobs[0][j]))
          << "prompt " << i << " token " << j;
    EXPECT_EQ(batch.prompt_lengths[i], int64_t(ps[i].size()));
    EXPECT_GT(batch.tokens[i].size(), ps[i].size());
  }
}

TEST(GptGenerationTest, ScoringGivesTheLogProbsOfTheFullForward) {
  Models m;
  const auto ps = prompts();
  GenerationOptions o = options(1, 0.0f, 1.0f, true);
  o.tokens_to_generate = 0;
  const GenerationOutput scored = generate_tokens(m.tp_model, ps, o);
  const GenerationOutput generated =
      generate_tokens(m.dense_model, ps, options(1, 0.0f, 1.0f, true));
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(scored.tokens[i], ps[i]);
    ASSERT_EQ(scored.logprobs[i].size(), ps[i].size() - 1);
    // The prompt part of a generation's log-probabilities is the score of the prompt.
    for (size_t j = 0; j + 1 < ps[i].size(); ++j)
      EXPECT_NEAR(scored.logprobs[i][j], generated.logprobs[i][j],
                  1e-5 * std::abs(generated.logprobs[i][j]));
  }
}

TEST(GptGenerationTest, SamplingIsTensorParallelInvariantAndReproducible) {
  Models m;
  const auto ps = prompts();
  for (const GenerationOptions& o : {options(1, 0.0f, 1.0f, false), options(5, 0.0f, 0.8f, false),
                                     options(0, 0.9f, 1.0f, true), options(0, 0.0f, 1.3f, false)}) {
    const GenerationOutput tp = generate_tokens(m.tp_model, ps, o);
    const GenerationOutput dense = generate_tokens(m.dense_model, ps, o);
    const GenerationOutput again = generate_tokens(m.tp_model, ps, o);
    EXPECT_EQ(tp.tokens, dense.tokens)
        << "top_k " << o.sampling.top_k << " top_p " << o.sampling.top_p;
    EXPECT_EQ(tp.tokens, again.tokens);
    // Every rank holds the same tokens.
    std::vector<int32_t> flat;
    for (const auto& t : tp.tokens) flat.insert(flat.end(), t.begin(), t.end());
    Tensor mine = Tensor::from_vector(flat, {int64_t(flat.size())});
    Tensor root = mine.clone();
    m.tp.tp->broadcast(root, 0);
    EXPECT_EQ(mine.to_vector<int32_t>(), root.to_vector<int32_t>());
  }
  GenerationOptions other_seed = options(0, 0.0f, 1.0f, false);
  const GenerationOutput a = generate_tokens(m.tp_model, ps, other_seed);
  other_seed.sampling.seed += 1;
  const GenerationOutput b = generate_tokens(m.tp_model, ps, other_seed);
  EXPECT_NE(a.tokens, b.tokens);
}

// Draws many tokens from one fixed logit row (each draw its own key) through the vocab-parallel
// sampler at TP = world, and compares the counts with the filtered distribution.
void check_distribution(const SamplingParams& p, const std::vector<double>& expected) {
  const int64_t vocab = 14, padded = 16, draws = 6000;
  ParallelState ps = test::tp_world_state();
  const int64_t vl = padded / ps.tp_size;
  std::vector<float> row = {2.0f, 1.5f, 1.4f,  1.0f, 0.5f, 0.0f, -0.5f, -1.0f,
                            0.2f, 0.3f, -2.0f, 1.2f, 0.8f, 0.1f, 9.0f,  9.0f};  // 14, 15: padding
  std::vector<float> local(size_t(draws * vl));
  for (int64_t d = 0; d < draws; ++d)
    for (int64_t c = 0; c < vl; ++c) local[size_t(d * vl + c)] = row[size_t(ps.tp_rank * vl + c)];
  std::vector<uint64_t> keys(static_cast<size_t>(draws));
  for (int64_t d = 0; d < draws; ++d) keys[size_t(d)] = sampling_row_key(7, 0, uint64_t(d));
  VocabParallelSampler sampler(*ps.tp, vocab, padded);
  Arena arena;
  const std::vector<int32_t> got =
      sampler.sample(Tensor::from_vector(local, {draws, vl}), p, keys, arena).to_vector<int32_t>();
  Tensor mine = Tensor::from_vector(got, {draws}), root = mine.clone();
  ps.tp->broadcast(root, 0);
  EXPECT_EQ(mine.to_vector<int32_t>(), root.to_vector<int32_t>()) << "ranks drew differently";
  std::vector<double> counts(size_t(vocab), 0.0);
  for (int32_t id : got) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, vocab);
    counts[size_t(id)] += 1;
  }
  for (int64_t i = 0; i < vocab; ++i) {
    const double e = expected[size_t(i)] * draws;
    const double sigma = std::sqrt(std::max(e * (1 - expected[size_t(i)]), 1e-9));
    if (expected[size_t(i)] == 0)
      EXPECT_EQ(counts[size_t(i)], 0) << "token " << i;
    else
      EXPECT_LE(std::abs(counts[size_t(i)] - e), 5 * sigma) << "token " << i << " expected " << e;
  }
}

std::vector<double> softmax_over(const std::vector<int>& keep, double temperature) {
  const std::vector<double> row = {2.0,  1.5, 1.4, 1.0,  0.5, 0.0, -0.5,
                                   -1.0, 0.2, 0.3, -2.0, 1.2, 0.8, 0.1};
  std::vector<double> p(row.size(), 0.0);
  double sum = 0;
  for (int i : keep) sum += std::exp(row[size_t(i)] / temperature);
  for (int i : keep) p[size_t(i)] = std::exp(row[size_t(i)] / temperature) / sum;
  return p;
}

TEST(VocabParallelSamplerTest, TopKDrawsFromTheRenormalisedTopK) {
  check_distribution({0.7f, 4, 0.0f, 11}, softmax_over({0, 1, 2, 11}, 0.7));
}

TEST(VocabParallelSamplerTest, TopPDrawsFromMegatronsNucleus) {
  // Sorted: 2.0 (0), 1.5 (1), 1.4 (2), 1.2 (11), 1.0 (3), 0.8 (12), ... The mass of the first
  // four is 0.61 < 0.62 and of the first five 0.70, so top_p = 0.62 keeps five tokens.
  const std::vector<double> full =
      softmax_over({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, 1.0);
  EXPECT_LT(full[0] + full[1] + full[2] + full[11], 0.62);
  EXPECT_GT(full[0] + full[1] + full[2] + full[11] + full[3], 0.62);
  check_distribution({1.0f, 0, 0.62f, 12}, softmax_over({0, 1, 2, 11, 3}, 1.0));
}

TEST(VocabParallelSamplerTest, TemperatureDrawsFromTheFullSoftmax) {
  check_distribution({1.5f, 0, 0.0f, 13},
                     softmax_over({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, 1.5));
}

TEST(VocabParallelSamplerTest, GreedyTakesTheArgMaxNeverPadding) {
  std::vector<double> only(14, 0.0);
  only[0] = 1.0;
  check_distribution({1.0f, 1, 0.0f, 0}, only);
}

}  // namespace
}  // namespace megatron
