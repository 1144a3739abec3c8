// Megatron's finetuning data readers (RACE, MNLI, QQP) and its BERT pair layout, against the
// Python port tools/reference/finetune_data_reference.py (tests/data/finetune/expected.json),
// and their errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/error_of.h"
#include "../common/temp_dir.h"
#include "core/error.h"
#include "data/read_file.h"
#include "tasks/finetune_data.h"
#include "tokenizer_test_files.h"

namespace megatron {
namespace {

using testing::error_of;

std::string fixture(const std::string& name) {
  return testing::source_file("tests/data/finetune/" + name);
}

const nlohmann::json& expected() {
  static const nlohmann::json j =
      nlohmann::json::parse(read_file(fixture("expected.json"), "test"));
  return j;
}

void expect_pairs(const std::vector<PairSample>& got, const nlohmann::json& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].text_a, want[i]["text_a"].get<std::string>()) << i;
    EXPECT_EQ(got[i].text_b, want[i]["text_b"].get<std::string>()) << i;
    EXPECT_EQ(got[i].label, want[i]["label"].get<int>()) << i;
    EXPECT_EQ(got[i].uid, want[i]["uid"].get<int64_t>()) << i;
  }
}

TEST(FinetuneData, MnliAsMegatron) {
  expect_pairs(read_mnli(fixture("mnli_train.tsv")), expected()["mnli_train"]);
  // A 10-column header: a test file, every label the test label (CRLF line ends).
  expect_pairs(read_mnli(fixture("mnli_test_matched.tsv")), expected()["mnli_test"]);
}

TEST(FinetuneData, QqpAsMegatron) {
  // Rows without 6 columns or with an empty question are skipped.
  expect_pairs(read_qqp(fixture("qqp_train.tsv")), expected()["qqp_train"]);
  expect_pairs(read_qqp(fixture("qqp_test.tsv")), expected()["qqp_test"]);
}

TEST(FinetuneData, RaceAsMegatron) {
  const std::vector<RaceQuestion> got = read_race(fixture("RACE/dev/middle"));
  const nlohmann::json& want = expected()["race"];
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].context, want[i]["context"].get<std::string>()) << i;
    EXPECT_EQ(got[i].label, want[i]["label"].get<int>()) << i;
    for (int c = 0; c < kRaceChoices; ++c)
      EXPECT_EQ(got[i].qa[size_t(c)], want[i]["qa"][size_t(c)].get<std::string>()) << i;
  }
}

TEST(FinetuneData, BertPairInputAsMegatron) {
  for (const nlohmann::json& c : expected()["pairs"]) {
    const bool has_b = !c["b"].is_null();
    const BertPairInput got =
        bert_pair_input(c["a"].get<std::vector<int32_t>>(),
                        has_b ? c["b"].get<std::vector<int32_t>>() : std::vector<int32_t>{}, has_b,
                        c["max_seq_length"].get<int64_t>(), 101, 102, 0);
    EXPECT_EQ(got.ids, c["out"]["ids"].get<std::vector<int32_t>>()) << c.dump();
    EXPECT_EQ(got.types, c["out"]["types"].get<std::vector<int32_t>>()) << c.dump();
    EXPECT_EQ(got.paddings, c["out"]["paddings"].get<std::vector<int32_t>>()) << c.dump();
  }
}

TEST(FinetuneData, CleanText) {
  // Three passes of " . " → ". " over "c . . . d" leave "c. .. d" (Python agrees).
  EXPECT_EQ(clean_text("a\n\n b\u3000\x1c c . . . d"), "a b c. .. d");
}

TEST(FinetuneData, BadInputNamesFileAndLine) {
  testing::TempDir dir;
  const std::string tsv = dir.path() + "/bad.tsv";
  std::ofstream(tsv) << "h1\th2\th3\th4\th5\th6\th7\th8\th9\th10\tlabel\n"
                     << "0\ta\tb\tc\td\te\tf\tg\ts1\ts2\tmaybe\n";
  EXPECT_NE(error_of([&] { read_mnli(tsv); }).find("line 2: label 'maybe'"), std::string::npos);
  std::ofstream(tsv) << "id\tq1\tq2\tq3\n";
  EXPECT_NE(error_of([&] { read_qqp(tsv); }).find("line 1: a header of 4 columns"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_race(dir.path()); }).find("holds no .txt files"),
            std::string::npos);
  std::ofstream(dir.path() + "/1.txt") << "{\"article\": \"x\", \"questions\": [\"q\"], "
                                          "\"options\": [[\"a\", \"b\", \"c\", \"d\"]], "
                                          "\"answers\": [\"E\"]}\n";
  EXPECT_NE(error_of([&] { read_race(dir.path()); }).find("line 1: answer 'E'"), std::string::npos);
  EXPECT_NE(error_of([&] { read_mnli(dir.path() + "/missing.tsv"); }).find("cannot be read"),
            std::string::npos);
}

}  // namespace
}  // namespace megatron
