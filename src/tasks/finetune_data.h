// The inputs of Megatron's BERT finetuning tasks, read exactly as Megatron reads them
// (tasks/data_utils.py, tasks/race/data.py, tasks/glue/mnli.py, tasks/glue/qqp.py): the text
// of each sample, and Megatron's layout of a text pair as one BERT input. Tokenization sits
// between the two (text → ids by the BERT WordPiece tokenizer).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace megatron {

// clean_text: newlines → spaces, every run of (Python) whitespace → one space, " . " → ". "
// (three passes, as Megatron).
std::string clean_text(std::string_view text);

// One sentence-pair classification sample (GLUE), texts cleaned.
struct PairSample {
  std::string text_a, text_b;
  int label = 0;
  int64_t uid = 0;
};

// MNLI TSV (GLUE's train.tsv / dev_matched.tsv / dev_mismatched.tsv / test_*.tsv): a header
// line, then sentence1 = column 8, sentence2 = column 9, label = the last column
// (contradiction 0, entailment 1, neutral 2), uid = column 0. A header of 10 columns marks a
// test file without labels: every label is `test_label`. Each line is stripped of surrounding
// whitespace before it is split at tabs (Megatron's line.strip().split('\t')). Throws Error
// naming the file and line for a short row, an empty sentence, an unknown label or a bad uid.
std::vector<PairSample> read_mnli(const std::string& path,
                                  const std::string& test_label = "contradiction");

// QQP TSV: a header, then id, qid1, qid2, question1, question2, is_duplicate (6 columns;
// label 0 or 1). A header of 3 columns (id, question1, question2) marks a test file: labels
// are `test_label`. Rows without 6 columns and rows with an empty question are skipped with a
// warning (Megatron's rule: the public train file has such rows).
std::vector<PairSample> read_qqp(const std::string& path, int test_label = 0);

// One RACE question: the article, and for each of the 4 options the question completed by it
// (the option replaces every "_" of the question, or follows it after a space), cleaned.
inline constexpr int kRaceChoices = 4;
struct RaceQuestion {
  std::string context;
  std::array<std::string, kRaceChoices> qa;
  int label = 0;  // answer letter − 'A'
};

// Every *.txt file of `dir` (RACE's layout: RACE/train/middle, RACE/dev/high, ...), each line
// one article as JSON {"article", "questions", "options", "answers"}. Files are read in
// sorted name order (Megatron's glob order is the file system's). Throws Error naming the file
// and line for malformed JSON, lists of different lengths, an option list not of 4, or an
// answer that is not A–D; and when `dir` holds no .txt file.
std::vector<RaceQuestion> read_race(const std::string& dir);

// Megatron's BERT input of a text pair (build_tokens_types_paddings_from_ids):
//   [CLS] a [SEP] b [SEP], types 0 for [CLS] a [SEP] and 1 for b [SEP], paddings 1 on tokens;
// cut to max_seq_length − 1 tokens and closed by [SEP] when it reaches max_seq_length; then
// padded with pad_id (ids AND types, as Megatron) and paddings 0. Without b (has_b = false)
// only [CLS] a [SEP] (and no final [SEP] unless cut).
struct BertPairInput {
  std::vector<int32_t> ids, types, paddings;  // each [max_seq_length]
};
BertPairInput bert_pair_input(const std::vector<int32_t>& a, const std::vector<int32_t>& b,
                              bool has_b, int64_t max_seq_length, int32_t cls_id, int32_t sep_id,
                              int32_t pad_id);

// RACE keeps at most this many tokens of question + option (Megatron's MAX_QA_LENGTH).
inline constexpr int64_t kRaceMaxQaLength = 128;

}  // namespace megatron
