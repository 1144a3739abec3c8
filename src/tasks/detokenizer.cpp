#include "tasks/detokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <memory>
#include <string_view>

#include "core/error.h"
#include "core/replace_all.h"
#include "data/utf8.h"
#include "tasks/python_text.h"

namespace megatron {

namespace {

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

// re.sub(pattern, replacement, text) for a pattern written with `S` where Python's pattern
// has `\s`, and a PCRE2 replacement ("$1" for Python's "\1"). The patterns used here cannot
// match the empty string, so Python's and PCRE2's rules for empty matches never differ.
void regex_replace_all(std::string& text, std::string_view pattern_with_s,
                       std::string_view replacement) {
  std::string pattern;
  for (char c : pattern_with_s) {
    if (c == 'S') {
      pattern += python_space_class();
    } else {
      pattern += c;
    }
  }
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  std::unique_ptr<pcre2_code, CodeDeleter> code(
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF, &error,
                    &error_offset, nullptr));
  MT_CHECK(code != nullptr, "detokenizer pattern '", pattern, "' failed to compile (PCRE2 error ",
           error, " at offset ", error_offset, ")");
  // JIT only speeds the matching up; without it PCRE2 interprets the same pattern.
  pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> match(
      pcre2_match_data_create_from_pattern(code.get(), nullptr));
  MT_CHECK(match != nullptr, "out of memory allocating PCRE2 match data");

  std::string out(text.size() + text.size() / 8 + 64, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    PCRE2_SIZE length = out.size();
    const int rc = pcre2_substitute(
        code.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0,
        PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH | PCRE2_NO_UTF_CHECK,
        match.get(), nullptr, reinterpret_cast<PCRE2_SPTR>(replacement.data()), replacement.size(),
        reinterpret_cast<PCRE2_UCHAR*>(out.data()), &length);
    if (rc == PCRE2_ERROR_NOMEMORY) {  // `length` is now the size needed
      out.assign(length, '\0');
      continue;
    }
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(rc, message.data(), message.size());
    MT_CHECK(rc >= 0, "detokenizer substitution '", pattern,
             "' failed: ", reinterpret_cast<const char*>(message.data()), " (PCRE2 error ", rc,
             ")");
    out.resize(length);
    text = std::move(out);
    return;
  }
  MT_THROW("detokenizer substitution '", pattern, "': output size changed between attempts");
}

std::string wikitext_detokenize(std::string s) {
  // contractions
  replace_all(s, "s '", "s'");
  // Megatron's pattern and replacement are both literal text with a class in the middle: it
  // rewrites "/' 7/" to the literal "/'[0-9]/" (sic).
  regex_replace_all(s, "/' [0-9]/", "/'[0-9]/");
  // number separators
  replace_all(s, " @-@ ", "-");
  replace_all(s, " @,@ ", ",");
  replace_all(s, " @.@ ", ".");
  // punctuation
  replace_all(s, " : ", ": ");
  replace_all(s, " ; ", "; ");
  replace_all(s, " . ", ". ");
  replace_all(s, " ! ", "! ");
  replace_all(s, " ? ", "? ");
  replace_all(s, " , ", ", ");
  // brackets and quotes: the shortest span to the next closing character, inner spaces trimmed
  regex_replace_all(s, "\\(S*([^)]*?)S*\\)", "($1)");
  regex_replace_all(s, "\\[S*([^\\]]*?)S*\\]", "[$1]");
  regex_replace_all(s, "\\{S*([^}]*?)S*\\}", "{$1}");
  regex_replace_all(s, "\"S*([^\"]*?)S*\"", "\"$1\"");
  regex_replace_all(s, "'S*([^']*?)S*'", "'$1'");
  // miscellaneous
  replace_all(s, "= = = =", "====");
  replace_all(s, "= = =", "===");
  replace_all(s, "= =", "==");
  replace_all(s, " \u00B0 ", "\u00B0");
  replace_all(s, " \n", "\n");
  replace_all(s, "\n ", "\n");
  replace_all(s, " N ", " 1 ");
  replace_all(s, " 's", "'s");
  return s;
}

std::string ptb_detokenize(std::string s) {
  replace_all(s, " '", "'");
  replace_all(s, " \n", "\n");
  replace_all(s, "\n ", "\n");
  replace_all(s, " n't", "n't");
  replace_all(s, " N ", "1 ");
  replace_all(s, "$ 1", "$1");
  replace_all(s, "# 1", "#1");
  return s;
}

}  // namespace

Detokenizer detokenizer_for_path(const std::string& path) {
  if (path.find("ptb") != std::string::npos) return Detokenizer::Ptb;
  if (path.find("wiki") != std::string::npos) return Detokenizer::WikiText;
  if (path.find("lambada") != std::string::npos) return Detokenizer::Lambada;
  MT_THROW("--valid-data '", path,
           "': the detokenizer is chosen by the file's path, as in Megatron, and the path "
           "contains none of 'wiki' (WikiText-103), 'ptb' (Penn Treebank) or 'lambada'; "
           "rename or link the file so that its path says which corpus it is");
}

std::string detokenize(Detokenizer which, std::string text) {
  check_utf8(text, "text to detokenize");
  switch (which) {
    case Detokenizer::Ptb:
      return ptb_detokenize(std::move(text));
    case Detokenizer::WikiText:
      return wikitext_detokenize(std::move(text));
    case Detokenizer::Lambada:
      return text;
  }
  MT_THROW("unknown detokenizer");
}

}  // namespace megatron
