// GptDataset: sample invariants against an independent reconstruction from the token
// stream, epoch counting and the separate-last-epoch rule (hand-computed), shuffling,
// caching, and the build_gpt_datasets factory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/gpt_datasets_factory.h"
#include "data/gpt_index_cache.h"
#include "data/indexed_dataset_builder.h"
#include "data_test_util.h"

namespace megatron {
namespace {

using test::TempDir;

// Document d has length lengths[d] and tokens 1000·d + position (so every token says where
// it came from).
void build_docs(const std::string& prefix, const std::vector<int32_t>& lengths) {
  IndexedDatasetBuilder b(prefix, IndexDType::I32);
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> tokens(size_t(lengths[d]));
    for (int32_t i = 0; i < lengths[d]; ++i) tokens[size_t(i)] = int32_t(1000 * d) + i;
    b.add_item(tokens);
    b.end_document();
  }
  b.finalize();
}

std::vector<int64_t> inverse(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size(), -1);
  for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
  return inv;
}

TEST(DataGptDataset, EpochCountAndLastEpochRuleMatchHandComputed) {
  // 100 tokens per epoch, s = 10: (E·100 − 1) / 10 samples from E epochs.
  EXPECT_EQ(gpt_num_epochs(100, 10, 9), 1);
  EXPECT_EQ(gpt_num_epochs(100, 10, 10), 2);
  EXPECT_EQ(gpt_num_epochs(100, 10, 19), 2);
  EXPECT_EQ(gpt_num_epochs(100, 10, 20), 3);
  std::vector<int32_t> sizes(10, 10);
  std::vector<int64_t> docs(10);
  std::iota(docs.begin(), docs.end(), 0);
  // 10 samples: 9 from epoch 1, 1 from epoch 2 < int(0.8 · 9) = 7 -> separate.
  GptIndex a = build_gpt_index(docs, sizes, 10, 10, 1);
  EXPECT_EQ(a.num_epochs, 2);
  EXPECT_TRUE(a.separate_last_epoch);
  EXPECT_EQ(a.num_samples(), 19);
  // 16 samples: 7 from epoch 2, not < 7 -> mixed.
  GptIndex b = build_gpt_index(docs, sizes, 10, 16, 1);
  EXPECT_FALSE(b.separate_last_epoch);
  // 15 samples: 6 < 7 -> separate.
  EXPECT_TRUE(build_gpt_index(docs, sizes, 10, 15, 1).separate_last_epoch);
}

TEST(DataGptDataset, SamplesAreConsecutiveWindowsOfTheShuffledDocumentStream) {
  TempDir dir;
  const std::vector<int32_t> lengths{5, 1, 17, 0, 3, 9, 2, 11, 4, 6};
  build_docs(dir.file("d"), lengths);
  auto data = std::make_shared<const IndexedDataset>(dir.file("d"));
  const int64_t s = 7;
  for (int64_t wanted : {3, 20, 40}) {  // one epoch, separate last epoch, mixed epochs
    GptDataset ds(data, "train", 2, 10, wanted, s, 1234);
    const GptIndex& idx = ds.index();
    ASSERT_GE(ds.size(), wanted);
    // Every document of the range appears exactly num_epochs times.
    std::map<int64_t, int64_t> seen;
    for (int64_t d : idx.doc_idx) ++seen[d];
    ASSERT_EQ(seen.size(), 8u);
    for (auto [d, count] : seen) {
      EXPECT_TRUE(d >= 2 && d < 10);
      EXPECT_EQ(count, idx.num_epochs);
    }
    if (idx.separate_last_epoch) {  // the last epoch is a permutation of its own
      std::vector<int64_t> last(idx.doc_idx.end() - 8, idx.doc_idx.end());
      std::sort(last.begin(), last.end());
      EXPECT_EQ(last, (std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9}));
    }
    // The token stream in doc_idx order, built independently.
    std::vector<int32_t> stream;
    for (int64_t d : idx.doc_idx)
      for (int32_t i = 0; i < lengths[size_t(d)]; ++i) stream.push_back(int32_t(1000 * d) + i);
    const std::vector<int64_t> inv = inverse(idx.shuffle_idx);
    std::vector<int32_t> tokens, previous;
    for (int64_t k = 0; k < ds.size(); ++k) {
      ASSERT_GE(inv[size_t(k)], 0) << "shuffle_idx is not a permutation";
      ds.sample(inv[size_t(k)], tokens);
      ASSERT_EQ(int64_t(tokens.size()), s + 1);
      std::vector<int32_t> expected(stream.begin() + k * s, stream.begin() + k * s + s + 1);
      ASSERT_EQ(tokens, expected) << "sample " << k;
      if (k > 0) {
        EXPECT_EQ(previous.back(), tokens.front());  // one shared boundary token
      }
      previous = tokens;
    }
  }
}

TEST(DataGptDataset, SeparateLastEpochShufflesItsSamplesAmongThemselves) {
  std::vector<int32_t> sizes(10, 10);
  std::vector<int64_t> docs(10);
  std::iota(docs.begin(), docs.end(), 0);
  GptIndex a = build_gpt_index(docs, sizes, 10, 10, 5);
  ASSERT_TRUE(a.separate_last_epoch);
  std::vector<int64_t> head(a.shuffle_idx.begin(), a.shuffle_idx.begin() + 9);
  std::vector<int64_t> tail(a.shuffle_idx.begin() + 9, a.shuffle_idx.end());
  std::sort(head.begin(), head.end());
  std::sort(tail.begin(), tail.end());
  for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(head[size_t(i)], i);
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(tail[size_t(i)], 9 + i);
}

TEST(DataGptDataset, ShuffleDependsOnlyOnSeed) {
  std::vector<int32_t> sizes(50, 13);
  std::vector<int64_t> docs(50);
  std::iota(docs.begin(), docs.end(), 0);
  GptIndex a = build_gpt_index(docs, sizes, 8, 60, 7);
  GptIndex b = build_gpt_index(docs, sizes, 8, 60, 7);
  GptIndex c = build_gpt_index(docs, sizes, 8, 60, 8);
  EXPECT_EQ(a.doc_idx, b.doc_idx);
  EXPECT_EQ(a.shuffle_idx, b.shuffle_idx);
  EXPECT_NE(a.doc_idx, c.doc_idx);
  EXPECT_NE(a.shuffle_idx, c.shuffle_idx);
  std::vector<int64_t> sorted = a.shuffle_idx;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], int64_t(i));
}

TEST(DataGptDataset, IndexIsCachedAndRebuiltWhenTheDataChanges) {
  TempDir dir;
  build_docs(dir.file("d"), {30, 40, 50});
  std::string first_path;
  GptIndex first;
  {
    GptDataset ds(std::make_shared<const IndexedDataset>(dir.file("d")), "train", 0, 3, 20, 9, 3);
    first_path = ds.cache_path();
    first = ds.index();
    ASSERT_TRUE(std::filesystem::exists(first_path));
  }
  // Loaded back verbatim.
  std::optional<GptIndex> loaded = load_gpt_index(first_path);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->doc_idx, first.doc_idx);
  EXPECT_EQ(loaded->sample_idx, first.sample_idx);
  EXPECT_EQ(loaded->shuffle_idx, first.shuffle_idx);
  // A truncated cache file is not trusted.
  std::vector<uint8_t> bytes = test::read_bytes(first_path);
  bytes.resize(bytes.size() - 8);
  test::write_bytes(first_path, bytes);
  EXPECT_FALSE(load_gpt_index(first_path).has_value());
  // Rewritten data (new size) selects another cache file; other params too.
  build_docs(dir.file("d"), {30, 40, 51});
  auto data = std::make_shared<const IndexedDataset>(dir.file("d"));
  GptDataset changed(data, "train", 0, 3, 20, 9, 3);
  EXPECT_NE(changed.cache_path(), first_path);
  GptDataset other_seed(data, "train", 0, 3, 20, 9, 4);
  EXPECT_NE(other_seed.cache_path(), changed.cache_path());
}

// --data-cache-path DIR: the index file goes to DIR (created), named after the prefix's file
// name, holds the same index, and is read back from there by the next run; nothing is written
// next to the data.
TEST(DataGptDataset, DataCachePathHoldsTheIndex) {
  TempDir dir;
  build_docs(dir.file("d"), {30, 40, 50});
  auto data = std::make_shared<const IndexedDataset>(dir.file("d"));
  const std::string cache = dir.file("cache/nested");
  GptDataset beside(data, "train", 0, 3, 20, 9, 3);
  GptDataset cached(data, "train", 0, 3, 20, 9, 3, cache);
  EXPECT_EQ(std::filesystem::path(cached.cache_path()).parent_path().string(), cache);
  EXPECT_EQ(std::filesystem::path(cached.cache_path()).filename().string(),
            std::filesystem::path(beside.cache_path()).filename().string());
  ASSERT_TRUE(std::filesystem::exists(cached.cache_path()));
  std::optional<GptIndex> loaded = load_gpt_index(cached.cache_path());
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->shuffle_idx, beside.index().shuffle_idx);
  // A second run with DIR reads the file (not rewritten) and writes nothing next to the data.
  std::filesystem::remove(beside.cache_path());
  const auto written = std::filesystem::last_write_time(cached.cache_path());
  GptDataset again(data, "train", 0, 3, 20, 9, 3, cache);
  EXPECT_EQ(std::filesystem::last_write_time(again.cache_path()), written);
  EXPECT_FALSE(std::filesystem::exists(beside.cache_path()));
  EXPECT_EQ(again.index().shuffle_idx, beside.index().shuffle_idx);
}

TEST(DataGptDataset, MegatronSampleCounts) {
  // 1000 iterations of 32, evaluating 10 iterations every 100: 11 evaluations.
  EXPECT_EQ(train_valid_test_num_samples(1000, 32, 100, 10),
            (std::array<int64_t, 3>{32000, 11 * 10 * 32, 320}));
  EXPECT_THROW(train_valid_test_num_samples(10, 0, 1, 1), Error);
}

TEST(DataGptDataset, FactoryBuildsSplitsAndBlends) {
  TempDir dir;
  std::vector<int32_t> lengths(100);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = int32_t(5 + i % 7);
  build_docs(dir.file("a"), lengths);
  build_docs(dir.file("b"), lengths);

  GptDatasets one = build_gpt_datasets({dir.file("a")}, "90,10,0", 16, 1, {50, 10, 5});
  ASSERT_NE(one.train, nullptr);
  ASSERT_NE(one.valid, nullptr);
  EXPECT_EQ(one.test, nullptr);  // the test split has no documents
  EXPECT_GE(one.train->size(), 50);
  EXPECT_EQ(one.train->seq_length(), 16);
  // The valid split is documents [90, 100): every token comes from there.
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < one.valid->size(); ++i) {
    one.valid->sample(i, tokens);
    for (int32_t t : tokens) EXPECT_GE(t / 1000, 90);
  }

  GptDatasets blend =
      build_gpt_datasets({"0.25", dir.file("a"), "0.75", dir.file("b")}, "1", 16, 1, {400, 0, 0});
  ASSERT_NE(blend.train, nullptr);
  EXPECT_EQ(blend.valid, nullptr);
  EXPECT_EQ(blend.train->size(), 400);
  auto blended = std::dynamic_pointer_cast<const BlendedDataset>(blend.train);
  ASSERT_NE(blended, nullptr);
  int64_t from_b = 0;
  for (int32_t k : blended->blending_index().dataset) from_b += k;
  EXPECT_EQ(from_b, 300);

  EXPECT_THAT(
      [&] {
        build_gpt_datasets({"x", dir.file("a"), "1"}, "1", 16, 1, {1, 0, 0});
      },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("weight/prefix pairs")));
  EXPECT_THAT(
      [&] {
        build_gpt_datasets({"x", dir.file("a")}, "1", 16, 1, {1, 0, 0});
      },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("weight 'x'")));
  EXPECT_THAT(
      [&] {
        build_gpt_datasets({dir.file("none")}, "1", 16, 1, {1, 0, 0});
      },
      ::testing::ThrowsMessage<Error>(::testing::HasSubstr("none.idx")));
}

}  // namespace
}  // namespace megatron
