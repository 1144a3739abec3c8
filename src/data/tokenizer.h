// Tokenizer: text <-> token ids, the interface every tokenizer implements.
//
// Implementations: GPT2BPETokenizer, BertWordPieceTokenizer (lower-case and cased),
// SentencePieceTokenizer, GPTSentencePieceTokenizer (also Llama2Tokenizer), HuggingFaceTokenizer,
// TikTokenizer, NullTokenizer. make_tokenizer() builds one from Megatron's flags.
#pragma once

#include <cstdint>
#include <memory>
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
};

struct TokenizerOptions {
  std::string type;  // GPT2BPETokenizer | BertWordPieceLowerCase | BertWordPieceCase |
                     // SentencePieceTokenizer | GPTSentencePieceTokenizer | Llama2Tokenizer |
                     // HuggingFaceTokenizer | TikTokenizer | NullTokenizer
  std::string vocab_file;
  std::string merge_file;
  std::string model_file;        // --tokenizer-model
  int64_t vocab_size = 0;        // --vocab-size, for NullTokenizer and TikTokenizer (0: 2^17)
  std::string tiktoken_pattern;  // --tiktoken-pattern v1 | v2, for TikTokenizer
  int64_t tiktoken_num_special_tokens = 1000;  // --tiktoken-num-special-tokens
};

// Throws Error naming the flag when a required file is missing or the type is unknown.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);

}  // namespace megatron
