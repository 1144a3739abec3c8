// GptDataLoader: Megatron's DP slicing (hand-computed), every global batch covered exactly
// once across ranks, resume from consumed samples equals the uninterrupted order, labels and
// the EOD loss mask, wrap-around, and errors from the loader thread.
#include "data/data_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"

namespace megatron {
namespace {

// Sample i is tokens 100·i + [0, s]; token 100·i + 3 is the EOD id 3 when i is even.
class CountingSource : public GptSampleSource {
 public:
  CountingSource(int64_t n, int64_t s) : n_(n), s_(s) {}
  int64_t size() const override { return n_; }
  int64_t seq_length() const override { return s_; }
  void sample(int64_t index, std::vector<int32_t>& tokens) const override {
    MT_CHECK(index >= 0 && index < n_, "sample ", index, " out of range");
    tokens.resize(size_t(s_ + 1));
    for (int64_t k = 0; k <= s_; ++k) tokens[size_t(k)] = int32_t(100 * index + k);
    if (index % 2 == 0) tokens[3] = 3;
  }

 private:
  int64_t n_, s_;
};

// Row j of the micro-batch is sample first_sample + j (mod 1000): returns those indices.
std::vector<int64_t> rows(const GptMicroBatch& mb) {
  std::vector<int64_t> out;
  const int64_t s = mb.tokens.size(1);
  const int32_t* t = mb.tokens.data<int32_t>();
  for (int64_t j = 0; j < mb.tokens.size(0); ++j) out.push_back(t[j * s + 1] / 100);
  return out;
}

GptDataLoaderOptions options(int64_t b, int64_t g, int r, int d, int64_t consumed) {
  GptDataLoaderOptions o;
  o.micro_batch = b;
  o.global_batch = g;
  o.dp_rank = r;
  o.dp_size = d;
  o.consumed_samples = consumed;
  return o;
}

TEST(DataLoader, DpSlicingMatchesMegatronSampler) {
  auto src = std::make_shared<CountingSource>(1000, 8);
  // b = 2, d = 2, G = 8: 2 micro-steps per global batch. Rank 1 reads [2,3], [6,7], [10,11].
  GptDataLoader rank1(src, options(2, 8, 1, 2, 0));
  EXPECT_EQ(rows(rank1.next()), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(rank1.consumed_samples(), 0);
  EXPECT_EQ(rows(rank1.next()), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(rank1.consumed_samples(), 8);
  GptMicroBatch third = rank1.next();
  EXPECT_EQ(third.first_sample, 10);
  EXPECT_EQ(rows(third), (std::vector<int64_t>{10, 11}));
}

TEST(DataLoader, RanksTogetherCoverEachGlobalBatchOnce) {
  auto src = std::make_shared<CountingSource>(1000, 4);
  const int d = 4;
  const int64_t b = 3, g = 24;
  std::vector<std::unique_ptr<GptDataLoader>> loaders;
  for (int r = 0; r < d; ++r)
    loaders.push_back(std::make_unique<GptDataLoader>(src, options(b, g, r, d, 48)));
  for (int64_t batch = 0; batch < 3; ++batch) {
    std::set<int64_t> seen;
    for (int64_t step = 0; step < g / (b * d); ++step)
      for (auto& l : loaders)
        for (int64_t i : rows(l->next())) EXPECT_TRUE(seen.insert(i).second) << i;
    std::set<int64_t> expected;
    for (int64_t i = 48 + batch * g; i < 48 + (batch + 1) * g; ++i) expected.insert(i);
    EXPECT_EQ(seen, expected);
  }
}

TEST(DataLoader, ResumeEqualsUninterruptedOrder) {
  auto src = std::make_shared<CountingSource>(1000, 4);
  for (int r = 0; r < 2; ++r) {
    GptDataLoader whole(src, options(2, 12, r, 2, 0));
    std::vector<std::vector<int64_t>> order;
    for (int i = 0; i < 30; ++i) order.push_back(rows(whole.next()));

    int64_t consumed = 0;
    {
      GptDataLoader first(src, options(2, 12, r, 2, 0));
      for (int i = 0; i < 9; ++i) first.next();  // 3 micro-steps per global batch: 3 batches
      consumed = first.consumed_samples();
    }
    EXPECT_EQ(consumed, 36);
    GptDataLoader resumed(src, options(2, 12, r, 2, consumed));
    for (int i = 9; i < 30; ++i) EXPECT_EQ(rows(resumed.next()), order[size_t(i)]) << i;
  }
}

TEST(DataLoader, LabelsShiftAndEodMaskAndWrap) {
  auto src = std::make_shared<CountingSource>(5, 6);
  GptDataLoaderOptions o = options(4, 4, 0, 1, 0);
  o.eod_token = 3;
  o.eod_mask_loss = true;
  o.prefetch = 0;
  GptDataLoader loader(src, o);
  loader.next();                     // samples 0..3
  GptMicroBatch mb = loader.next();  // samples 4, 0, 1, 2 (wrapped)
  EXPECT_EQ(mb.first_sample, 4);
  EXPECT_EQ(mb.tokens.shape(), (Shape{4, 6}));
  const int32_t* t = mb.tokens.data<int32_t>();
  const int32_t* l = mb.labels.data<int32_t>();
  const float* m = mb.loss_mask.data<float>();
  const int64_t expected_rows[4] = {4, 0, 1, 2};
  for (int64_t j = 0; j < 4; ++j) {
    std::vector<int32_t> sample;
    src->sample(expected_rows[j], sample);
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_EQ(t[j * 6 + i], sample[size_t(i)]);
      EXPECT_EQ(l[j * 6 + i], sample[size_t(i + 1)]);
      EXPECT_EQ(m[j * 6 + i], sample[size_t(i)] == 3 ? 0.0f : 1.0f);
    }
  }
  EXPECT_EQ(m[0 * 6 + 3], 0.0f);  // sample 4 is even: its input token 3 is EOD
  EXPECT_EQ(m[2 * 6 + 3], 1.0f);  // sample 1 is odd
}

class FailingSource : public CountingSource {
 public:
  FailingSource() : CountingSource(100, 4) {}
  void sample(int64_t index, std::vector<int32_t>& tokens) const override {
    if (index == 5) MT_THROW("broken sample 5");
    CountingSource::sample(index, tokens);
  }
};

TEST(DataLoader, ErrorsReachTheCaller) {
  GptDataLoader loader(std::make_shared<FailingSource>(), options(2, 2, 0, 1, 0));
  loader.next();
  loader.next();
  EXPECT_THAT([&] { loader.next(); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("broken sample 5")));
  auto src = std::make_shared<CountingSource>(10, 4);
  EXPECT_THAT([&] { GptDataLoader(src, options(2, 6, 0, 2, 0)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("not a positive multiple")));
  EXPECT_THAT([&] { GptDataLoader(src, options(2, 4, 2, 2, 0)); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("rank 2 out of range")));
}

}  // namespace
}  // namespace megatron
