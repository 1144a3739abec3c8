// GPT2BPETokenizer: GPT-2's byte-level BPE (Radford et al. 2019; openai/gpt-2 encoder.py),
// from encoder.json (--vocab-file) and vocab.bpe (--merge-file).
//
// encode: split the text with GPT-2's pre-tokenization pattern (PCRE2, UTF-8 + Unicode
// properties), turn each piece into its bytes, and apply merges lowest rank first inside the
// piece. Tokens are held as raw bytes (the byte<->unicode table is undone at load time), so
// BPE works on ids and byte strings with no per-call translation. Results per piece are
// cached in a mutex-sharded table, so encode() may be called from many threads at once.
// "<|endoftext|>" (id 50256) is the EOD token; like GPT-2, encode() never produces it from
// text. decode: concatenate the tokens' bytes and replace ill-formed UTF-8 with U+FFFD.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/byte_level.h"
#include "data/tokenizers/tokenizer.h"

namespace megatron {

class GPT2BPETokenizer final : public Tokenizer {
 public:
  // Throws Error naming the file (and line, for merges) when either file is malformed.
  GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file);
  ~GPT2BPETokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;

  // The pre-tokenized pieces of text (GPT-2's regex split), exposed for tests.
  std::vector<std::string_view> pre_tokenize(std::string_view text) const;

 private:
  struct State;  // vocabulary, merges, compiled pattern, cache (keeps PCRE2 out of the header)
  std::unique_ptr<State> state_;
};

}  // namespace megatron
