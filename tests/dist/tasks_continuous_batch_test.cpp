// Continuous batching (tasks/continuous_batch.h) at TP = world size (1, 2, 4): sequences that
// join the running batch at token boundaries — while others are mid-decode, into slots that
// others just left — get exactly the tokens generate_tokens gives each alone (greedy, top-k,
// top-p with decay, temperature; stop tokens and stop sequences), their log-probabilities and
// most likely tokens to 1e-5, at TP = t and at TP = 1; a cancelled sequence ends at the next
// step with a prefix of its tokens; scoring sequences end after their prefill.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "model/gpt_model.h"
#include "tasks/continuous_batch.h"
#include "tasks/generation.h"
#include "tp_test_util.h"

namespace megatron {
namespace {

GptConfig continuous_config() {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.vocab_size = 1000;
  c.padded_vocab_size = padded_vocab_size(1000, 128, 4);
  c.max_position_embeddings = 64;
  c.seq_length = 32;
  return c;
}

struct ContinuousModels {
  GptConfig config = continuous_config();
  ParallelState tp = test::tp_world_state(), dense = test::dense_state();
  ParameterStore tp_store{tp.tp_rank, tp.tp_size}, dense_store{0, 1};
  GptModel tp_model{config, tp, tp_store}, dense_model{config, dense, dense_store};
  ContinuousModels() {
    tp_store.allocate();
    dense_store.allocate();
    test::copy_dense_into_shards(dense_store, tp_store, 5, 0.15);
    tp_model.refresh_compute_weights();
    dense_model.refresh_compute_weights();
  }
};

// Sequence k: a prompt of 1 + k % 6 tokens, 3 to 14 tokens to generate, sampling by k % 4.
SequenceRequest sequence(int k) {
  SequenceRequest s;
  for (int i = 0; i < 1 + k % 6; ++i) s.prompt.push_back(int32_t((k * 131 + i * 17 + 3) % 1000));
  s.request = uint64_t(100 + k);
  s.index = uint64_t(k % 3);
  GenerationOptions& o = s.options;
  o.tokens_to_generate = 3 + (k * 5) % 12;
  o.sampling.seed = 99;
  switch (k % 4) {
    case 0:
      o.sampling.top_k = 1;
      break;
    case 1:
      o.sampling.top_k = 20;
      break;
    case 2:
      o.sampling.top_p = 0.9f;
      o.top_p_decay = 0.9f;
      o.top_p_bound = 0.5f;
      break;
    default:
      o.sampling.temperature = 0.7f;
      break;
  }
  if (k % 5 == 1) {
    o.logprobs = true;
    o.top_logprobs = 1 + k % 3;
  }
  if (k % 7 == 2) o.stop_tokens = {int32_t((k * 37) % 1000)};
  if (k % 6 == 4) o.stop_sequences = {{int32_t(k % 1000), int32_t((k + 1) % 1000)}};
  return s;
}

// generate_tokens on the sequence alone: row `index` of a batch of index + 1 copies of its
// prompt (rows of one prompt are alone: they share every position), keyed by its request.
GenerationOutput alone(GptModel& model, const SequenceRequest& s) {
  GenerationOptions o = s.options;
  o.request = s.request;
  const GenerationOutput all =
      generate_tokens(model, std::vector<std::vector<int32_t>>(s.index + 1, s.prompt), o);
  GenerationOutput row;
  row.tokens = {all.tokens[s.index]};
  row.prompt_lengths = {all.prompt_lengths[s.index]};
  if (o.logprobs) row.logprobs = {all.logprobs[s.index]};
  if (o.top_logprobs > 0) row.top_logprobs = {all.top_logprobs[s.index]};
  return row;
}

// Runs `count` sequences through a batch of `slots` slots: sequence k is added at step
// join_step(k) or, when no slot is free then, at the first boundary after that with one. Every
// step's report is kept.
struct ContinuousRun {
  std::map<int, GenerationOutput> outputs;
  std::vector<StepReport> steps;
};
ContinuousRun run_continuous(GptModel& model, int count, int64_t slots, int cancel = -1) {
  ContinuousBatch batch(model, slots, model.config().max_position_embeddings);
  ContinuousRun run;
  std::map<int64_t, int> in_slot;
  int next = 0;
  for (int step = 0; next < count || !batch.idle(); ++step) {
    EXPECT_LT(step, 1000);
    if (step > 1000) break;
    // Joins: sequence k may start from step 2·(k / 3) on (several at once, and while others
    // decode).
    for (; next < count && step >= 2 * (next / 3) && batch.free_slots() > 0; ++next)
      in_slot[batch.add(sequence(next))] = next;
    for (const auto& [slot, k] : in_slot)
      if (k == cancel && batch.sequence(slot).tokens.size() >= sequence(k).prompt.size() + 2)
        batch.cancel(slot);
    StepReport report = batch.step();
    for (auto& [slot, out] : report.finished) {
      run.outputs[in_slot.at(slot)] = out;
      in_slot.erase(slot);
    }
    report.finished.clear();
    run.steps.push_back(std::move(report));
  }
  return run;
}

void expect_same(const GenerationOutput& got, const GenerationOutput& want, int k) {
  ASSERT_EQ(got.tokens.size(), 1u);
  EXPECT_EQ(got.tokens[0], want.tokens[0]) << "sequence " << k;
  EXPECT_EQ(got.prompt_lengths, want.prompt_lengths) << "sequence " << k;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << "sequence " << k;
  if (got.logprobs.empty()) return;
  ASSERT_EQ(got.logprobs[0].size(), want.logprobs[0].size()) << "sequence " << k;
  for (size_t j = 0; j < got.logprobs[0].size(); ++j)
    EXPECT_NEAR(got.logprobs[0][j], want.logprobs[0][j], 1e-5) << "sequence " << k << " at " << j;
  ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size()) << "sequence " << k;
  if (got.top_logprobs.empty()) return;
  ASSERT_EQ(got.top_logprobs[0].size(), want.top_logprobs[0].size()) << "sequence " << k;
  for (size_t j = 0; j < got.top_logprobs[0].size(); ++j) {
    ASSERT_EQ(got.top_logprobs[0][j].size(), want.top_logprobs[0][j].size());
    for (size_t i = 0; i < got.top_logprobs[0][j].size(); ++i) {
      EXPECT_EQ(got.top_logprobs[0][j][i].first, want.top_logprobs[0][j][i].first);
      EXPECT_NEAR(got.top_logprobs[0][j][i].second, want.top_logprobs[0][j][i].second, 1e-5);
    }
  }
}

TEST(ContinuousBatchTest, SequencesJoiningMidDecodeGetWhatTheyGetAlone) {
  ContinuousModels m;
  constexpr int kCount = 14;
  const ContinuousRun tp_run = run_continuous(m.tp_model, kCount, 4);
  const ContinuousRun dense_run = run_continuous(m.dense_model, kCount, 4);
  ASSERT_EQ(int(tp_run.outputs.size()), kCount);
  for (int k = 0; k < kCount; ++k) {
    const GenerationOutput want = alone(m.dense_model, sequence(k));
    expect_same(tp_run.outputs.at(k), want, k);
    expect_same(dense_run.outputs.at(k), want, k);
  }
  // Some step prefilled newcomers while others decoded (a join at a token boundary), and the
  // batch was full at times (rows waited for a slot that another had left).
  bool joined = false;
  int64_t most = 0;
  for (const StepReport& r : tp_run.steps) {
    joined = joined || (r.prefilled_rows > 0 && r.decoded_rows > 0);
    most = std::max(most, r.decoded_rows);
  }
  EXPECT_TRUE(joined);
  EXPECT_EQ(most, 4);
}

TEST(ContinuousBatchTest, OneSlotServesOneSequenceAtATime) {
  ContinuousModels m;
  const ContinuousRun run = run_continuous(m.tp_model, 4, 1);
  for (int k = 0; k < 4; ++k) expect_same(run.outputs.at(k), alone(m.dense_model, sequence(k)), k);
  for (const StepReport& r : run.steps) EXPECT_LE(r.prefilled_rows + r.decoded_rows, 1);
}

TEST(ContinuousBatchTest, ACancelledSequenceEndsAtTheNextStep) {
  ContinuousModels m;
  constexpr int kCancel = 4;  // 11 tokens to generate
  const ContinuousRun run = run_continuous(m.tp_model, 6, 3, kCancel);
  const std::vector<int32_t> full = alone(m.dense_model, sequence(kCancel)).tokens[0];
  const std::vector<int32_t>& cut = run.outputs.at(kCancel).tokens[0];
  EXPECT_EQ(cut.size(), sequence(kCancel).prompt.size() + 2);
  ASSERT_LT(cut.size(), full.size());
  EXPECT_TRUE(std::equal(cut.begin(), cut.end(), full.begin()));
  for (int k = 0; k < 6; ++k)
    if (k != kCancel) expect_same(run.outputs.at(k), alone(m.dense_model, sequence(k)), k);
}

TEST(ContinuousBatchTest, ScoringSequencesEndAfterTheirPrefill) {
  ContinuousModels m;
  ContinuousBatch batch(m.tp_model, 2, 64);
  SequenceRequest score = sequence(1), generate = sequence(0);
  score.options.tokens_to_generate = 0;
  score.options.logprobs = true;
  score.options.top_logprobs = 0;
  score.prompt = {5, 6, 7, 8, 9};
  generate.prompt = {1, 2, 3, 4, 9};  // one prefill group with the scoring sequence
  batch.add(generate);
  const int64_t slot = batch.add(score);
  const StepReport r = batch.step();
  ASSERT_EQ(r.finished.size(), 1u);
  EXPECT_EQ(r.finished[0].first, slot);
  expect_same(r.finished[0].second, alone(m.dense_model, score), 1);
  EXPECT_EQ(r.advanced, std::vector<int64_t>{0});
  EXPECT_EQ(batch.free_slots(), 1);
}

TEST(ContinuousBatchTest, RefusesWhatDoesNotFit) {
  ContinuousModels m;
  ContinuousBatch batch(m.tp_model, 1, 16);
  SequenceRequest s = sequence(0);
  s.options.tokens_to_generate = 16;
  EXPECT_NE(batch.fit_error(s).find("16 positions"), std::string::npos) << batch.fit_error(s);
  EXPECT_THROW(batch.add(s), Error);
  s.options.tokens_to_generate = 3;
  batch.add(s);
  EXPECT_THROW(batch.add(s), Error);  // no free slot
}

}  // namespace
}  // namespace megatron
