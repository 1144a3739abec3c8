// Tokenizer: text <-> token ids, the interface every tokenizer implements.
//
// Implementations: GPT2BPETokenizer, BertWordPieceTokenizer (lower-case and cased),
// SentencePieceTokenizer, GPTSentencePieceTokenizer (also Llama2Tokenizer), HuggingFaceTokenizer,
// TikTokenizer, NullTokenizer. make_tokenizer() (data/tokenizers/make_tokenizer.h) builds one
// from Megatron's flags.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megatron {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int64_t vocab_size() const = 0;  // real entries (before any padding)
  // Special ids; -1 when the tokenizer has none.
  virtual int32_t eod() const { return -1; }
  virtual int32_t cls() const { return -1; }
  virtual int32_t sep() const { return -1; }
  virtual int32_t mask() const { return -1; }
  virtual int32_t pad() const { return -1; }
  // The id of the vocabulary entry spelled `token` (as the vocabulary file writes it, e.g.
  // "<fim_prefix>"), Megatron's tokens_to_ids; nullopt when there is none, or when this
  // tokenizer cannot look entries up.
  virtual std::optional<int32_t> token_to_id(std::string_view /*token*/) const {
    return std::nullopt;
  }
};

}  // namespace megatron
