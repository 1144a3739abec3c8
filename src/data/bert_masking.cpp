#include "data/bert_masking.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "data/split.h"

namespace megatron {

MaskedPositions mask_whole_words(std::vector<int32_t>& tokens, int64_t max_num_tokens,
                                 const BertMaskingOptions& opt, RandomStream& rng) {
  MT_CHECK(opt.max_ngrams >= 1, "max n-gram size must be >= 1");
  MT_CHECK(opt.vocab_size > 0, "masking needs the vocabulary size");
  // words[w]: the positions of word w's pieces.
  std::vector<std::vector<int64_t>> words;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t t = tokens[i];
    if (t == opt.cls || t == opt.sep) continue;
    const bool starts = opt.word_start == nullptr || opt.word_start->empty() ||
                        (size_t(t) >= opt.word_start->size() || (*opt.word_start)[size_t(t)]);
    if (!words.empty() && !starts) {
      words.back().push_back(int64_t(i));
    } else {
      words.push_back({int64_t(i)});
    }
  }
  MaskedPositions out;
  if (opt.mask_prob <= 0 || words.empty()) return out;
  const double num_to_predict = std::min(
      opt.mask_prob * double(max_num_tokens),
      double(std::max<int64_t>(1, round_half_even(double(tokens.size()) * opt.mask_prob))));

  // P(n) ∝ 1/n for n = 1..max_ngrams.
  std::vector<double> pvals(size_t(opt.max_ngrams));
  for (int n = 1; n <= opt.max_ngrams; ++n) pvals[size_t(n - 1)] = 1.0 / n;

  std::vector<int64_t> starts(words.size());  // n-gram start words, visited in random order
  std::iota(starts.begin(), starts.end(), 0);
  rng.shuffle(starts);

  const std::vector<int32_t> original = tokens;
  std::vector<uint8_t> covered(tokens.size(), 0);
  int64_t masked = 0;
  for (int64_t start : starts) {
    if (double(masked) >= num_to_predict) break;
    const double total = std::accumulate(pvals.begin(), pvals.end(), 0.0);
    double u = rng.uniform() * total;
    int n = 1;
    while (n < opt.max_ngrams && u >= pvals[size_t(n - 1)]) u -= pvals[size_t(n++ - 1)];
    // The pieces of words [start, start + n), shortened until they fit the budget.
    auto pieces = [&](int words_n) {
      std::vector<int64_t> p;
      const int64_t end = std::min<int64_t>(start + words_n, int64_t(words.size()));
      for (int64_t w = start; w < end; ++w)
        p.insert(p.end(), words[size_t(w)].begin(), words[size_t(w)].end());
      return p;
    };
    std::vector<int64_t> index_set = pieces(n);
    while (double(masked + int64_t(index_set.size())) > num_to_predict && n > 1)
      index_set = pieces(--n);
    if (double(masked + int64_t(index_set.size())) > num_to_predict) continue;
    if (std::any_of(index_set.begin(), index_set.end(),
                    [&](int64_t i) { return covered[size_t(i)]; }))
      continue;
    for (int64_t i : index_set) {
      covered[size_t(i)] = 1;
      ++masked;
      if (rng.uniform() < 0.8) {
        tokens[size_t(i)] = opt.mask;
      } else if (rng.uniform() >= 0.5) {  // else keep the original (the other half)
        tokens[size_t(i)] = int32_t(rng.below(uint64_t(opt.vocab_size)));
      }
    }
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!covered[i]) continue;
    out.positions.push_back(int64_t(i));
    out.labels.push_back(original[i]);
  }
  return out;
}

std::vector<uint8_t> word_starts_from_vocab_file(const std::string& path) {
  std::ifstream f(path);
  MT_REQUIRE(f.good(), "cannot read vocab file '", path, "'");
  std::vector<uint8_t> starts;
  std::string line;
  while (std::getline(f, line)) starts.push_back(line.rfind("##", 0) == 0 ? 0 : 1);
  MT_REQUIRE(!starts.empty(), "vocab file '", path, "' is empty");
  return starts;
}

}  // namespace megatron
