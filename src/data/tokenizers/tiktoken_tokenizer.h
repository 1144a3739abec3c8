// TikTokenizer: Megatron-LM's TikTokenizer (megatron/core TikTokenTokenizer), tiktoken's
// byte-level BPE over a ranks file in Megatron's JSON form (--tokenizer-model: a list of
// {"rank": i, "token_bytes": base64, "token_str": ...} with rank == position and ranks 0..255
// the single bytes).
//
// Id layout, as Megatron's: ids [0, num_special_tokens) are special tokens ("<unk>", "<s>",
// "</s>", "<mask>", "<pad>", "<cls>", "<sep>", then "<SPECIAL_7>", ...), id
// num_special_tokens + r is the token of rank r. The file is cut to its first
// vocab_size - num_special_tokens ranks (vocab_size defaults to 2^17, as Megatron's), and must
// have at least that many.
//
// encode is tiktoken's encode(text, allowed_special="all") with --tiktoken-pattern v1 or v2
// (Megatron's two split regexes; v2 when the flag is not given), as Megatron's text_to_ids:
// special-token text becomes the special token's id, and no BOS/EOS is added. A piece that is
// itself a token is that token; otherwise BPE merges the adjacent pair whose concatenation
// has the lowest rank, leftmost first. EOD is "</s>" (id 2); mask, pad, cls and sep are ids
// 3..6. decode joins the tokens' bytes (a special token is its text) and replaces ill-formed
// UTF-8 with U+FFFD.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizers/tokenizer.h"

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
  int32_t mask() const override;
  int32_t pad() const override;
  int32_t cls() const override;
  int32_t sep() const override;

 private:
  struct State;  // ranks, split regex, cache
  std::unique_ptr<State> state_;
};

}  // namespace megatron
