// BertWordPieceTokenizer: BERT's tokenizer (google-research/bert tokenization.py, which
// Megatron-LM copies) from a vocab.txt (--vocab-file), lower-case (BertWordPieceLowerCase) or
// cased (BertWordPieceCase).
//
// encode = basic tokenization then WordPiece:
//   1. drop NUL, U+FFFD and control characters (Cc, Cf; tab/newline/CR count as spaces);
//      split on whitespace (space, tab, newline, CR, Zs, and U+2028/U+2029 like str.split());
//   2. every CJK ideograph is a word of its own;
//   3. lower-case only: lower-case (Python str.lower() rules) and strip accents (utf8proc NFD,
//      then drop Mn marks);
//   4. every punctuation character (P* categories and all non-alphanumeric ASCII) is a word;
//   5. greedy longest-match WordPiece per word, continuations prefixed "##"; a word with no
//      segmentation, or longer than kMaxWordChars code points, becomes [UNK].
// Each word's ids are cached (words repeat), and encode() is safe to call from many threads.
// decode joins tokens with spaces, glues "##" continuations and applies
// clean_up_tokenization (" ." -> ".", " n't" -> "n't", ...), as Megatron's decode does.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/piece_cache.h"
#include "data/tokenizers/string_hash.h"
#include "data/tokenizers/tokenizer.h"

namespace megatron {

class BertWordPieceTokenizer final : public Tokenizer {
 public:
  // Longer words are [UNK] (HF BertTokenizer's limit; Google's original code uses 200).
  static constexpr size_t kMaxWordChars = 100;

  // Throws Error naming the file when it is empty, repeats a token or lacks one of
  // [UNK] [CLS] [SEP] [MASK] [PAD].
  BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int32_t cls() const override { return cls_; }
  int32_t sep() const override { return sep_; }
  int32_t mask() const override { return mask_; }
  int32_t pad() const override { return pad_; }
  int32_t unk() const { return unk_; }

  // The vocabulary entry of id (for tests and debugging).
  const std::string& token(int32_t id) const;

 private:
  // Steps 3-5 for one whitespace/CJK-delimited word (UTF-8), appending ids to out; cached.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  // encode_word without the cache.
  void tokenize_word(std::string_view word, std::vector<int32_t>& out) const;
  // Step 5 for one punctuation-free piece.
  void wordpiece(std::string_view piece, std::vector<int32_t>& out) const;
  int32_t required_id(const std::string& token, const std::string& vocab_file) const;

  bool lower_case_;
  std::vector<std::string> tokens_;  // [vocab_size] entry per id (line number - 1)
  StringMap<int32_t> ids_;           // entry -> id
  size_t max_token_chars_ = 0;       // longest entry in code points, "##" excluded
  int32_t unk_ = -1, cls_ = -1, sep_ = -1, mask_ = -1, pad_ = -1;
  mutable PieceCache cache_;  // word -> ids; thread-safe, so encode() can stay const
};

}  // namespace megatron
