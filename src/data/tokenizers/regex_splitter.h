// RegexSplitter: the pre-tokenization split of byte-level BPE tokenizers (GPT-2, tiktoken,
// HuggingFace "Split"): a PCRE2 pattern (UTF-8, Unicode properties, JIT) cuts text into
// pieces that BPE then encodes one by one.
//
// The patterns come from Python's `regex`, Rust's `fancy-regex` and Oniguruma, whose `\s` is
// the Unicode White_Space set. PCRE2's `\s` under UCP omits U+0085, so the constructor spells
// `\s` and `\S` out as that set first (with_unicode_whitespace).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace megatron {

// pattern with `\s` (and `\S` outside character classes) replaced by the explicit Unicode
// White_Space set. Throws Error naming `what` for `\S` inside a class, which has no such
// spelling.
std::string with_unicode_whitespace(std::string_view pattern, std::string_view what);

class RegexSplitter {
 public:
  // Throws Error naming `what` (e.g. "--tokenizer-model 'x' pre_tokenizer") when the pattern
  // does not compile.
  RegexSplitter(std::string_view pattern, std::string_view what);
  ~RegexSplitter();
  RegexSplitter(RegexSplitter&&) noexcept;

  // Appends to `pieces` every match and every non-empty stretch between matches, in order
  // (HuggingFace's "Isolated" behaviour; the tokenizers' own patterns match every character,
  // so there are no stretches for them). `text` must be well-formed UTF-8 (check_utf8):
  // matching skips PCRE2's validation, which would otherwise re-scan the text for every piece.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

}  // namespace megatron
