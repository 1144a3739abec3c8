#include "tasks/zero_shot_datasets.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/read_file.h"
#include "data/utf8.h"
#include "tasks/detokenizer.h"
#include "tasks/python_text.h"

namespace megatron {

LmCorpus read_lm_corpus(const std::string& path, const Tokenizer& tokenizer) {
  const Detokenizer detokenizer = detokenizer_for_path(path);
  std::string text = read_file(path, "--valid-data");
  check_utf8(text, "--valid-data '" + path + "'");
  LmCorpus corpus;
  // len(text.strip().split(" ")): one more than the spaces inside the stripped text.
  const std::string_view stripped = python_strip(text);
  corpus.num_original_tokens = 1 + std::count(stripped.begin(), stripped.end(), ' ');
  corpus.tokens = tokenizer.encode(detokenize(detokenizer, std::move(text)));
  corpus.num_tokenized_tokens = int64_t(corpus.tokens.size());
  MT_CHECK(corpus.num_tokenized_tokens >= 2, "--valid-data '", path, "' tokenizes to ",
           corpus.num_tokenized_tokens, " token(s): at least 2 are needed to score one prediction");
  return corpus;
}

LmWindows::LmWindows(std::vector<int32_t> tokens, int64_t seq_length, int32_t pad,
                     int64_t overlapping_eval)
    : tokens_(std::move(tokens)),
      seq_length_(seq_length),
      overlapping_eval_(std::max<int64_t>(1, overlapping_eval)),
      pad_(pad) {
  MT_CHECK(seq_length_ >= 1, "--seq-length must be positive (got ", seq_length_, ")");
  const int64_t targets = std::max<int64_t>(int64_t(tokens_.size()) - 1 - overlapping_eval_, 0);
  num_windows_ = (targets + overlapping_eval_ - 1) / overlapping_eval_ + 1;
}

EvalSample LmWindows::operator[](int64_t index) const {
  MT_CHECK(index >= 0 && index < num_windows_, "window ", index, " out of range [0, ", num_windows_,
           ")");
  const int64_t start = index * overlapping_eval_;
  const int64_t end = std::min<int64_t>(start + seq_length_ + 1, int64_t(tokens_.size()));
  EvalSample s;
  s.tokens.assign(tokens_.begin() + start, tokens_.begin() + end);
  const int64_t real = end - start;  // tokens before the padding
  s.tokens.resize(size_t(seq_length_ + 1), pad_);
  s.mask.assign(size_t(seq_length_), 0.0f);
  // Target i is tokens[i + 1]: scored when it is real and, after the first window, among the
  // last overlapping_eval targets (Python's pad_mask[:-k] *= 0 clears nothing when k >= s).
  const int64_t first_scored = (index == 0 || overlapping_eval_ == seq_length_)
                                   ? 0
                                   : std::max<int64_t>(0, seq_length_ - overlapping_eval_);
  for (int64_t i = first_scored; i < real - 1; ++i) s.mask[size_t(i)] = 1.0f;
  return s;
}

namespace {

// Context and target tokens of one LAMBADA text (_LambadaDataset.get_tokens).
void lambada_tokens(const Tokenizer& tokenizer, const std::string& text, bool strict,
                    std::vector<int32_t>& context, std::vector<int32_t>& target) {
  if (!strict) {
    context = tokenizer.encode(text);
    target.assign(1, context.back());
    context.pop_back();
    return;
  }
  const std::string last_word(python_split(text).back());
  const size_t start = text.rfind(last_word);
  context = tokenizer.encode(python_strip(std::string_view(text).substr(0, start)));
  target = tokenizer.encode(" " + last_word);
}

}  // namespace

std::vector<EvalSample> read_lambada(const std::string& path, const Tokenizer& tokenizer,
                                     int64_t seq_length, bool strict) {
  std::ifstream in(path, std::ios::binary);
  MT_CHECK(in, "--valid-data '", path, "' cannot be read");
  std::vector<EvalSample> samples;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      MT_THROW("--valid-data '", path, "' line ", n, ": not valid JSON (", e.what(),
               "); LAMBADA is read as one JSON object per line with a \"text\" field");
    }
    MT_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), "--valid-data '", path,
             "' line ", n, ": expected an object with a string \"text\" field");
    const std::string text = j["text"].get<std::string>();
    MT_CHECK(!python_split(text).empty(), "--valid-data '", path, "' line ", n,
             ": the text is empty, there is no last word to predict");
    std::vector<int32_t> context, target;
    lambada_tokens(tokenizer, text, strict, context, target);
    EvalSample s;
    s.tokens = context;
    s.tokens.insert(s.tokens.end(), target.begin(), target.end());
    MT_CHECK(int64_t(s.tokens.size()) <= seq_length + 1, "--valid-data '", path, "' line ", n,
             ": the sample has ", s.tokens.size(),
             " tokens, more than --seq-length + 1 = ", seq_length + 1,
             "; raise --seq-length (at most the model's positions)");
    // pad_mask over the tokens, shifted by one onto the targets: 1 on the target tokens.
    s.mask.assign(size_t(seq_length), 0.0f);
    for (size_t i = std::max<size_t>(context.size(), 1); i < s.tokens.size(); ++i)
      s.mask[i - 1] = 1.0f;
    s.tokens.resize(size_t(seq_length + 1), tokenizer.eod());
    samples.push_back(std::move(s));
  }
  MT_CHECK(!samples.empty(), "--valid-data '", path, "' holds no LAMBADA samples");
  return samples;
}

}  // namespace megatron
