// HuggingFaceTokenizer: Megatron's HuggingFaceTokenizer (transformers' AutoTokenizer) for the
// tokenizer.json files of byte-level BPE models: GPT-2, RoBERTa, Llama 3, Qwen2/3, Mistral
// (Tekken) style. --tokenizer-model is the tokenizer.json file or the directory holding it;
// tokenizer_config.json beside it, when present, names the eos/bos/pad tokens and
// clean_up_tokenization_spaces.
//
// encode = tokenizer(text).input_ids, as Megatron's tokenize():
//   1. added tokens (special or not) are cut out of the raw text first, leftmost-longest;
//   2. each stretch between them is normalized (NFC/NFD/NFKC/NFKD, or a Sequence of them);
//   3. pre-tokenized: "Split" regexes (behaviour Isolated) and "ByteLevel" (add_prefix_space,
//      use_regex with GPT-2's pattern), alone or in a "Sequence";
//   4. each piece is BPE-encoded over its bytes with the merges ("a b" or ["a", "b"] form);
//      with "ignore_merges" a piece that is itself a token is taken whole;
//   5. the post-processor adds its special tokens (TemplateProcessing "single", or
//      RobertaProcessing's <s> ... </s>; ByteLevel adds none).
// decode = tokenizer.decode(ids): tokens' bytes (an added token is its text), ill-formed
// UTF-8 replaced with U+FFFD, then clean_up_tokenization when the config asks for it.
// Anything else in the file (other models, normalizers, pre-tokenizers, lstrip/rstrip added
// tokens) is rejected by name rather than tokenized differently.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/tokenizer.h"

namespace megatron {

class HuggingFaceTokenizer final : public Tokenizer {
 public:
  // Throws Error naming --tokenizer-model and the offending JSON key when the file is missing,
  // malformed or uses a component this implementation does not have.
  explicit HuggingFaceTokenizer(const std::string& path);
  ~HuggingFaceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;  // len(tokenizer): vocabulary plus added tokens
  int32_t eod() const override;         // eos_token of tokenizer_config.json, else -1
  int32_t pad() const override;         // pad_token, else -1
  int32_t bos() const;                  // bos_token, else -1
  // An added token's content, or a vocabulary entry in its byte-level spelling.
  std::optional<int32_t> token_to_id(std::string_view token) const override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace megatron
