// make_tokenizer: Megatron's --tokenizer-type names to implementations, with errors that name
// the missing flag.
#include "data/tokenizers/make_tokenizer.h"

#include "core/error.h"
#include "data/tokenizers/bert_wordpiece_tokenizer.h"
#include "data/tokenizers/gpt2_bpe_tokenizer.h"
#include "data/tokenizers/gpt_sentencepiece_tokenizer.h"
#include "data/tokenizers/huggingface_tokenizer.h"
#include "data/tokenizers/null_tokenizer.h"
#include "data/tokenizers/sentencepiece_tokenizer.h"
#include "data/tokenizers/tiktoken_tokenizer.h"

namespace megatron {
namespace {

constexpr const char* kTokenizerTypes =
    "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, SentencePieceTokenizer, "
    "GPTSentencePieceTokenizer, Llama2Tokenizer, HuggingFaceTokenizer, TikTokenizer, "
    "NullTokenizer";

void require(const std::string& value, const char* flag, const std::string& type) {
  MT_REQUIRE(!value.empty(), flag, " is required for --tokenizer-type ", type);
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options) {
  const std::string& type = options.type;
  if (type == "GPT2BPETokenizer") {
    require(options.vocab_file, "--vocab-file", type);
    require(options.merge_file, "--merge-file", type);
    return std::make_unique<GPT2BPETokenizer>(options.vocab_file, options.merge_file);
  }
  if (type == "BertWordPieceLowerCase" || type == "BertWordPieceCase") {
    require(options.vocab_file, "--vocab-file", type);
    return std::make_unique<BertWordPieceTokenizer>(options.vocab_file,
                                                    type == "BertWordPieceLowerCase");
  }
  if (type == "SentencePieceTokenizer") {
    require(options.model_file, "--tokenizer-model", type);
    return std::make_unique<SentencePieceTokenizer>(options.model_file);
  }
  if (type == "GPTSentencePieceTokenizer" || type == "Llama2Tokenizer") {
    require(options.model_file, "--tokenizer-model", type);
    return std::make_unique<GPTSentencePieceTokenizer>(options.model_file);
  }
  if (type == "HuggingFaceTokenizer") {
    require(options.model_file, "--tokenizer-model", type);
    return std::make_unique<HuggingFaceTokenizer>(options.model_file);
  }
  if (type == "TikTokenizer") {
    require(options.model_file, "--tokenizer-model", type);
    // Megatron's TikTokenTokenizer splits with v2 unless --tiktoken-pattern says otherwise.
    return std::make_unique<TikTokenizer>(
        options.model_file, options.tiktoken_pattern.empty() ? "v2" : options.tiktoken_pattern,
        options.vocab_size, options.tiktoken_num_special_tokens);
  }
  if (type == "NullTokenizer") {
    MT_REQUIRE(options.vocab_size > 0, "--vocab-size (> 0) is required for --tokenizer-type ",
               type);
    return std::make_unique<NullTokenizer>(options.vocab_size);
  }
  if (type.empty()) MT_THROW("--tokenizer-type is required; expected one of ", kTokenizerTypes);
  MT_THROW("unknown --tokenizer-type '", type, "'; expected one of ", kTokenizerTypes);
}

}  // namespace megatron
