#include "tasks/finetune_dataset.h"

#include "core/error.h"

namespace megatron {

namespace {

void check_special_tokens(const Tokenizer& tokenizer) {
  MT_REQUIRE(tokenizer.cls() >= 0 && tokenizer.sep() >= 0 && tokenizer.pad() >= 0,
             "finetuning needs a tokenizer with [CLS], [SEP] and [PAD] (--tokenizer-type "
             "BertWordPieceLowerCase or BertWordPieceCase)");
}

FinetuneDataset empty_dataset(const std::string& name, int64_t choices, int64_t seq_length) {
  MT_REQUIRE(seq_length >= 3, "--seq-length ", seq_length,
             " cannot hold [CLS] a [SEP] b [SEP]; give at least 3");
  FinetuneDataset d;
  d.name = name;
  d.choices = choices;
  d.seq_length = seq_length;
  return d;
}

void append_row(FinetuneDataset& d, const BertPairInput& row) {
  d.ids.insert(d.ids.end(), row.ids.begin(), row.ids.end());
  d.types.insert(d.types.end(), row.types.begin(), row.types.end());
  // Megatron's paddings are 1 on tokens; the model's mask is 1 on padding.
  for (int32_t p : row.paddings) d.pad_mask.push_back(p == 0 ? 1 : 0);
}

// Python's str.strip(chars).
std::string strip_chars(const std::string& s, const std::string& chars) {
  const size_t first = s.find_first_not_of(chars);
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(chars) - first + 1);
}

std::string after_last(const std::string& s, const std::string& marker) {
  const size_t at = s.rfind(marker);
  return at == std::string::npos ? s : s.substr(at + marker.size());
}

std::string replace_all(std::string s, char from, char to) {
  for (char& c : s)
    if (c == from) c = to;
  return s;
}

}  // namespace

FinetuneDataset race_dataset(const std::string& name, const std::vector<RaceQuestion>& questions,
                             const Tokenizer& tokenizer, int64_t seq_length) {
  check_special_tokens(tokenizer);
  FinetuneDataset d = empty_dataset(name, kRaceChoices, seq_length);
  std::string last_context;
  std::vector<int32_t> context_ids;
  for (const RaceQuestion& q : questions) {
    // The questions of one article are consecutive: tokenize its passage once.
    if (context_ids.empty() || q.context != last_context) {
      context_ids = tokenizer.encode(q.context);
      last_context = q.context;
    }
    for (const std::string& qa : q.qa) {
      std::vector<int32_t> qa_ids = tokenizer.encode(qa);
      if (int64_t(qa_ids.size()) > kRaceMaxQaLength) qa_ids.resize(kRaceMaxQaLength);
      append_row(d, bert_pair_input(qa_ids, context_ids, /*has_b=*/true, seq_length,
                                    tokenizer.cls(), tokenizer.sep(), tokenizer.pad()));
    }
    d.labels.push_back(q.label);
  }
  return d;
}

FinetuneDataset pair_dataset(const std::string& name, const std::vector<PairSample>& samples,
                             const Tokenizer& tokenizer, int64_t seq_length) {
  check_special_tokens(tokenizer);
  FinetuneDataset d = empty_dataset(name, 1, seq_length);
  for (const PairSample& s : samples) {
    append_row(d, bert_pair_input(tokenizer.encode(s.text_a), tokenizer.encode(s.text_b),
                                  /*has_b=*/true, seq_length, tokenizer.cls(), tokenizer.sep(),
                                  tokenizer.pad()));
    d.labels.push_back(s.label);
  }
  return d;
}

std::string finetune_dataset_name(const std::string& task, const std::string& path) {
  if (task == "RACE") return replace_all(strip_chars(after_last(path, "RACE"), "/"), '/', '-');
  MT_REQUIRE(task == "MNLI" || task == "QQP", "unknown finetuning task '", task,
             "'; expected RACE, MNLI or QQP");
  return replace_all(strip_chars(strip_chars(after_last(path, task), ".tsv"), "/"), '_', '-');
}

}  // namespace megatron
