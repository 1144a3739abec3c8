// NullTokenizer: the text already is token ids, whitespace-separated decimal integers. For
// tests and synthetic data (Megatron's NullTokenizer). vocab_size is --vocab-size and the EOD
// id is the last one, vocab_size - 1.
#pragma once

#include "data/tokenizers/tokenizer.h"

namespace megatron {

class NullTokenizer final : public Tokenizer {
 public:
  // Throws Error unless vocab_size > 0.
  explicit NullTokenizer(int64_t vocab_size);

  // Throws Error naming the offending word when it is not an integer in [0, vocab_size).
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;  // ids joined by " "
  int64_t vocab_size() const override { return vocab_size_; }
  int32_t eod() const override { return static_cast<int32_t>(vocab_size_ - 1); }

 private:
  int64_t vocab_size_;
};

}  // namespace megatron
