// Whole-word n-gram masking for BERT's masked-LM objective (Megatron's
// create_masked_lm_predictions with masking_style "bert", do_whole_word_mask, max_ngrams 3).
//
// Words are runs of pieces where only the first piece is a word start (WordPiece marks the
// others with "##"); [CLS]/[SEP] are never masked. The number of masked pieces is
// min(mask_prob · max_num_tokens, max(1, round(mask_prob · len))). Candidate n-grams of
// 1..max_ngrams whole words are visited in random order, each with n drawn with P(n) ∝ 1/n
// (shortened when it would overshoot), skipping any that overlap an already masked piece.
// Each chosen piece becomes [MASK] with probability 0.8, stays itself with 0.1 and becomes a
// uniformly random vocabulary id with 0.1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/random_stream.h"

namespace megatron {

struct BertMaskingOptions {
  double mask_prob = 0.15;
  int max_ngrams = 3;
  int32_t cls = -1, sep = -1, mask = -1;
  int64_t vocab_size = 0;
  // word_start[id] != 0 when piece `id` begins a word; empty: every piece is a word; ids
  // beyond the table begin words.
  const std::vector<uint8_t>* word_start = nullptr;
};

struct MaskedPositions {
  std::vector<int64_t> positions;  // ascending
  std::vector<int32_t> labels;     // the original token at each position
};

// Masks `tokens` in place and returns what was masked.
MaskedPositions mask_whole_words(std::vector<int32_t>& tokens, int64_t max_num_tokens,
                                 const BertMaskingOptions& options, RandomStream& rng);

// word_start table from a WordPiece vocab file (one piece per line, line i = id i):
// pieces beginning with "##" continue a word.
std::vector<uint8_t> word_starts_from_vocab_file(const std::string& path);

}  // namespace megatron
