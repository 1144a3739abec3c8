// The tokenized finetuning datasets (tasks/finetune_dataset.h) — Megatron's row layout of RACE
// (question+option first, 4 rows per question, question+option cut at 128 tokens) and of a
// GLUE pair, the padding mask, Megatron's dataset names (with Python's str.strip quirks) — and
// Megatron's iterations per epoch (tasks/finetune_step.h), worked by hand.
#include <gtest/gtest.h>

#include <sstream>

#include "core/error.h"
#include "tasks/finetune_dataset.h"
#include "tasks/finetune_step.h"

namespace megatron {
namespace {

// Each whitespace-separated word is its length + 10; [CLS] 1, [SEP] 2, [PAD] 0.
class WordLengthTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::istringstream in{std::string(text)};
    std::vector<int32_t> ids;
    for (std::string w; in >> w;) ids.push_back(int32_t(w.size()) + 10);
    return ids;
  }
  std::string decode(const std::vector<int32_t>&) const override { return ""; }
  int64_t vocab_size() const override { return 300; }
  int32_t cls() const override { return 1; }
  int32_t sep() const override { return 2; }
  int32_t pad() const override { return 0; }
};

TEST(FinetuneDataset, RaceRowsAreQuestionOptionThenPassage) {
  RaceQuestion q;
  q.context = "aaa bb";
  q.qa = {"c", "dd", "eee eee", std::string(130 * 2, 'x')};
  for (size_t i = 0; i < 130; ++i) q.qa[3][2 * i + 1] = ' ';  // 130 one-letter words
  q.label = 2;
  const FinetuneDataset d = race_dataset("dev-middle", {q}, WordLengthTokenizer(), 8);
  EXPECT_EQ(d.name, "dev-middle");
  EXPECT_EQ(d.choices, 4);
  ASSERT_EQ(d.size(), 1);
  EXPECT_EQ(d.labels[0], 2);
  ASSERT_EQ(d.ids.size(), 4u * 8u);
  auto row = [&](const std::vector<int32_t>& v, int r) {
    return std::vector<int32_t>(v.begin() + r * 8, v.begin() + (r + 1) * 8);
  };
  // [CLS] c [SEP] aaa bb [SEP] pad pad: the option's question is segment A (type 0).
  EXPECT_EQ(row(d.ids, 0), (std::vector<int32_t>{1, 11, 2, 13, 12, 2, 0, 0}));
  EXPECT_EQ(row(d.types, 0), (std::vector<int32_t>{0, 0, 0, 1, 1, 1, 0, 0}));
  EXPECT_EQ(std::vector<uint8_t>(d.pad_mask.begin(), d.pad_mask.begin() + 8),
            (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(row(d.ids, 2), (std::vector<int32_t>{1, 13, 13, 2, 13, 12, 2, 0}));
  // 130 tokens of question+option are cut to 128, then the row to 8 with a closing [SEP].
  EXPECT_EQ(row(d.ids, 3), (std::vector<int32_t>{1, 11, 11, 11, 11, 11, 11, 2}));
}

TEST(FinetuneDataset, PairRowsAreTextAThenTextB) {
  const FinetuneDataset d = pair_dataset("dev-matched", {{"aa", "b c", 1, 0}, {"a", "bb", 2, 1}},
                                         WordLengthTokenizer(), 7);
  EXPECT_EQ(d.choices, 1);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(std::vector<int32_t>(d.ids.begin(), d.ids.begin() + 7),
            (std::vector<int32_t>{1, 12, 2, 11, 11, 2, 0}));
  EXPECT_EQ(std::vector<int32_t>(d.types.begin() + 7, d.types.end()),
            (std::vector<int32_t>{0, 0, 0, 1, 1, 0, 0}));
}

TEST(FinetuneDataset, MegatronDatasetNames) {
  EXPECT_EQ(finetune_dataset_name("RACE", "data/RACE/dev/middle"), "dev-middle");
  EXPECT_EQ(finetune_dataset_name("RACE", "/x/RACE/test/high/"), "test-high");
  EXPECT_EQ(finetune_dataset_name("MNLI", "glue/MNLI/dev_matched.tsv"), "dev-matched");
  EXPECT_EQ(finetune_dataset_name("MNLI", "glue/MNLI/test_mismatched.tsv"), "test-mismatched");
  // Python's 'dev.tsv'.strip('.tsv') is 'de': the characters, not the suffix, are stripped.
  EXPECT_EQ(finetune_dataset_name("QQP", "glue/QQP/dev.tsv"), "de");
  EXPECT_THROW(finetune_dataset_name("SST", "glue/SST/dev.tsv"), Error);
}

TEST(FinetuneDataset, TokenizerWithoutBertSpecialTokensIsAnError) {
  class Plain final : public Tokenizer {
   public:
    std::vector<int32_t> encode(std::string_view) const override { return {}; }
    std::string decode(const std::vector<int32_t>&) const override { return ""; }
    int64_t vocab_size() const override { return 3; }
  };
  try {
    pair_dataset("x", {{"a", "b", 0, 0}}, Plain(), 8);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[CLS], [SEP] and [PAD]"), std::string::npos);
  }
}

TEST(FinetuneDataset, IterationsPerEpochAreMegatrons) {
  // len(DataLoader(DistributedSampler(N, dp), micro, drop_last)) = floor(ceil(N/dp) / micro)
  EXPECT_EQ(finetune_iterations_per_epoch(200, 8, 1), 25);
  EXPECT_EQ(finetune_iterations_per_epoch(10, 1, 4), 3);
  EXPECT_EQ(finetune_iterations_per_epoch(10, 2, 4), 1);
  EXPECT_EQ(finetune_iterations_per_epoch(3, 4, 1), 0);
}

}  // namespace
}  // namespace megatron
