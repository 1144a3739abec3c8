// make_tokenizer: a Tokenizer from Megatron's --tokenizer-type and the files it names. The one
// place that knows every implementation.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/tokenizers/tokenizer.h"

namespace megatron {

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
