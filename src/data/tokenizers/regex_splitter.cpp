// RegexSplitter on PCRE2.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizers/regex_splitter.h"

#include <pcre2.h>

#include "core/error.h"
#include "data/utf8.h"

namespace megatron {
namespace {

// Unicode White_Space, the set Python's `regex`, fancy-regex and Oniguruma match with `\s`.
constexpr std::string_view kWhiteSpace =
    "\\t-\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}"
    "\\x{205f}\\x{3000}";

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

std::string with_unicode_whitespace(std::string_view pattern, std::string_view what) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        MT_REQUIRE(!in_class, what, ": '\\S' inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' (or '^]') right after the opening bracket is a literal, not the end.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct RegexSplitter::Compiled {
  std::unique_ptr<pcre2_code, CodeDeleter> code;
};

RegexSplitter::RegexSplitter(std::string_view pattern, std::string_view what)
    : compiled_(std::make_unique<Compiled>()) {
  const std::string expanded = with_unicode_whitespace(pattern, what);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(expanded.data()),
                                      expanded.size(), PCRE2_UTF | PCRE2_UCP, &error_code,
                                      &error_offset, nullptr));
  if (compiled_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error_code, message, sizeof(message));
    MT_THROW(what, ": the regex '", pattern,
             "' does not compile: ", reinterpret_cast<const char*>(message), " (at offset ",
             error_offset, " of its expansion)");
  }
  // JIT is an optimization only: without it pcre2_match interprets the same pattern.
  pcre2_jit_compile(compiled_->code.get(), PCRE2_JIT_COMPLETE);
}

RegexSplitter::~RegexSplitter() = default;
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(compiled_->code.get(), nullptr));
  MT_CHECK(match != nullptr, "out of memory allocating PCRE2 match data");
  size_t offset = 0;     // where the next match may start
  size_t unmatched = 0;  // start of the text not yet emitted
  while (offset < text.size()) {
    const int rc = pcre2_match(compiled_->code.get(), reinterpret_cast<PCRE2_SPTR>(text.data()),
                               text.size(), offset, PCRE2_NO_UTF_CHECK, match.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    MT_CHECK(rc > 0, "pre-tokenization failed at byte ", offset, " (PCRE2 error ", rc, ")");
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match.get());
    if (ovector[1] == ovector[0]) {
      // An empty match splits nothing; step over one character so the search moves on.
      offset = ovector[0];
      next_code_point(text, offset);
      continue;
    }
    if (ovector[0] > unmatched) pieces.push_back(text.substr(unmatched, ovector[0] - unmatched));
    pieces.push_back(text.substr(ovector[0], ovector[1] - ovector[0]));
    offset = unmatched = ovector[1];
  }
  if (unmatched < text.size()) pieces.push_back(text.substr(unmatched));
}

}  // namespace megatron
