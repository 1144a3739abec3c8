// TikTokenizer: Megatron's TikTokenizer (CustomTikTokenizer), tiktoken's byte-level BPE over a
// ranks file in Megatron's JSON form (--tokenizer-model: a list of {"rank": i, "token_bytes":
// base64, "token_str": ...} with rank == position and ranks 0..255 the single bytes).
//
// Id layout, as Megatron's: ids [0, num_special_tokens) are special tokens ("<unk>", "<s>",
// "</s>", then "<SPECIAL_3>", ...), id num_special_tokens + r is the token of rank r. The file
// is cut to its first vocab_size - num_special_tokens ranks (vocab_size defaults to 2^17, as
// Megatron's), and must have at least that many.
//
// encode is tiktoken's encode_ordinary with --tiktoken-pattern v1 or v2 (Megatron's two split
// regexes): special-token text is encoded as text, and no BOS/EOS is added (Megatron's
// tokenize(bos=False, eos=False)). A piece that is itself a token is that token; otherwise
// BPE merges the adjacent pair whose concatenation has the lowest rank, leftmost first.
// EOD is "</s>" (id 2). decode joins the tokens' bytes (a special token is its text) and
// replaces ill-formed UTF-8 with U+FFFD.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace megatron {

class TikTokenizer final : public Tokenizer {
 public:
  // Throws Error naming the flag when the file is missing or malformed, the pattern is not
  // v1/v2, or the sizes do not fit.
  TikTokenizer(const std::string& ranks_file, const std::string& pattern, int64_t vocab_size,
               int64_t num_special_tokens);
  ~TikTokenizer() override;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  int32_t eod() const override;

 private:
  struct State;  // ranks, split regex, cache
  std::unique_ptr<State> state_;
};

}  // namespace megatron
