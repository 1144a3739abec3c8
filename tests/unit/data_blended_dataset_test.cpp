// BlendedDataset: Megatron's greedy weighting, checked by hand for the first picks and for
// counts within one sample of weight · n at every prefix; samples routed to their source.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "data/blended_dataset.h"

namespace megatron {
namespace {

// Sample i of source k is {k, i, i, ...}.
class TaggedSource : public GptSampleSource {
 public:
  TaggedSource(int32_t tag, int64_t n) : tag_(tag), n_(n) {}
  int64_t size() const override { return n_; }
  int64_t seq_length() const override { return 3; }
  void sample(int64_t index, std::vector<int32_t>& tokens) const override {
    tokens.assign(4, int32_t(index));
    tokens[0] = tag_;
  }

 private:
  int32_t tag_;
  int64_t n_;
};

TEST(DataBlendedDataset, FirstPicksMatchHandComputed) {
  // i=0: errors .5 .3 .2 -> 0; i=1 (target 1): -.5 .3 .2 -> 1; i=2 (target 2): 0 -.4 .4 -> 2;
  // i=3 (target 3): .5 -.1 -.4 -> 0.
  BlendingIndex idx = build_blending_index({5, 3, 2}, 4);
  EXPECT_EQ(idx.dataset, (std::vector<int32_t>{0, 1, 2, 0}));
  EXPECT_EQ(idx.dataset_sample, (std::vector<int64_t>{0, 0, 0, 1}));
}

TEST(DataBlendedDataset, CountsFollowWeightsAtEveryPrefix) {
  const std::vector<double> w{0.5, 0.3, 0.15, 0.05};
  const int64_t n = 5000;
  BlendingIndex idx = build_blending_index(w, n);
  std::vector<int64_t> counts(w.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int32_t k = idx.dataset[size_t(i)];
    ASSERT_EQ(idx.dataset_sample[size_t(i)], counts[size_t(k)]);  // next unused sample
    ++counts[size_t(k)];
    for (size_t j = 0; j < w.size(); ++j)
      ASSERT_LE(std::abs(double(counts[j]) - w[j] * double(i + 1)), 1.0) << "i=" << i;
  }
  EXPECT_EQ(counts, (std::vector<int64_t>{2500, 1500, 750, 250}));
}

TEST(DataBlendedDataset, SamplesComeFromTheirSource) {
  std::vector<std::shared_ptr<const GptSampleSource>> sources{
      std::make_shared<TaggedSource>(7, 100), std::make_shared<TaggedSource>(9, 100)};
  BlendedDataset blend(sources, {1, 3}, 40);
  EXPECT_EQ(blend.size(), 40);
  EXPECT_EQ(blend.seq_length(), 3);
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < 40; ++i) {
    blend.sample(i, tokens);
    const BlendingIndex& idx = blend.blending_index();
    EXPECT_EQ(tokens[0], idx.dataset[size_t(i)] == 0 ? 7 : 9);
    EXPECT_EQ(tokens[1], idx.dataset_sample[size_t(i)]);
  }
  EXPECT_THAT(
      [&] {
        BlendedDataset(sources, {1, 3}, 1000);
      },
      ::testing::ThrowsMessage<Error>(
          ::testing::HasSubstr("dataset 0 has 100 samples, the blend needs 250")));
  EXPECT_THAT(
      [&] {
        build_blending_index({1, -1}, 3);
      },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("negative")));
}

}  // namespace
}  // namespace megatron
