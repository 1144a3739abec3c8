#include "data/sentence_splitter.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace megatron {

namespace {

// Lower-case abbreviations (without the final '.') after which a '.' does not end a
// sentence: titles, common Latin and business abbreviations, months, units.
constexpr std::array<std::string_view, 52> kAbbreviations = {
    "mr",  "mrs",    "ms",   "dr",  "prof", "sr",  "jr",   "st",  "mt",  "rev", "gen",
    "gov", "sen",    "rep",  "col", "lt",   "sgt", "capt", "hon", "vs",  "etc", "e.g",
    "i.e", "cf",     "al",   "inc", "ltd",  "co",  "corp", "no",  "nos", "fig", "vol",
    "pp",  "approx", "dept", "est", "jan",  "feb", "mar",  "apr", "jun", "jul", "aug",
    "sep", "sept",   "oct",  "nov", "dec",  "ave", "blvd", "op"};

bool is_space(char c) {
  return std::isspace(static_cast<unsigned char>(c)) != 0;
}
bool is_closer(char c) {
  return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}';
}
bool is_opener(char c) {
  return c == '"' || c == '\'' || c == '(' || c == '[';
}

// UTF-8 curly quotes: ” ’ close, “ ‘ open (3 bytes each: E2 80 9D/99 and E2 80 9C/98).
size_t utf8_closer_length(std::string_view s, size_t i) {
  if (i + 2 < s.size() && uint8_t(s[i]) == 0xE2 && uint8_t(s[i + 1]) == 0x80 &&
      (uint8_t(s[i + 2]) == 0x9D || uint8_t(s[i + 2]) == 0x99))
    return 3;
  return 0;
}
bool utf8_opener_at(std::string_view s, size_t i) {
  return i + 2 < s.size() && uint8_t(s[i]) == 0xE2 && uint8_t(s[i + 1]) == 0x80 &&
         (uint8_t(s[i + 2]) == 0x9C || uint8_t(s[i + 2]) == 0x98);
}

// Whether the word ending just before the '.' at `dot` makes that '.' part of the word.
bool period_is_abbreviation(std::string_view text, size_t dot) {
  size_t begin = dot;
  while (begin > 0 && !is_space(text[begin - 1]) && !is_opener(text[begin - 1])) --begin;
  std::string word(text.substr(begin, dot - begin));
  if (word.empty()) return false;
  std::transform(word.begin(), word.end(), word.begin(),
                 [](char c) { return char(std::tolower(static_cast<unsigned char>(c))); });
  if (word.size() == 1 && std::isalpha(static_cast<unsigned char>(word[0]))) return true;
  // A dotted acronym: letters separated by single dots ("u.s", "p.m").
  bool dotted = word.find('.') != std::string::npos;
  for (size_t i = 0; dotted && i < word.size(); i += 2) {
    dotted = std::isalpha(static_cast<unsigned char>(word[i])) &&
             (i + 1 == word.size() || word[i + 1] == '.');
  }
  if (dotted) return true;
  return std::find(kAbbreviations.begin(), kAbbreviations.end(), word) != kAbbreviations.end();
}

bool starts_sentence(std::string_view text, size_t i) {
  if (i >= text.size()) return false;
  const unsigned char c = static_cast<unsigned char>(text[i]);
  return std::isupper(c) || std::isdigit(c) || is_opener(char(c)) || utf8_opener_at(text, i) ||
         c >= 0x80;  // a non-ASCII letter: no case information, trust the punctuation
}

void push_trimmed(std::vector<std::string_view>& out, std::string_view piece) {
  size_t b = 0, e = piece.size();
  while (b < e && is_space(piece[b])) ++b;
  while (e > b && is_space(piece[e - 1])) --e;
  if (e > b) out.push_back(piece.substr(b, e - b));
}

}  // namespace

std::vector<std::string_view> split_sentences(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n' && i + 1 < text.size()) {
      // A blank line (possibly with spaces) is a paragraph break.
      size_t j = i + 1;
      while (j < text.size() && text[j] != '\n' && is_space(text[j])) ++j;
      if (j < text.size() && text[j] == '\n') {
        push_trimmed(out, text.substr(start, i - start));
        start = j + 1;
        i = j + 1;
        continue;
      }
    }
    if (c != '.' && c != '!' && c != '?') {
      ++i;
      continue;
    }
    const size_t first_mark = i;
    while (i < text.size() && (text[i] == '.' || text[i] == '!' || text[i] == '?')) ++i;
    const bool single_period = (i - first_mark == 1) && c == '.';
    while (i < text.size()) {  // closing quotes and brackets belong to the sentence
      if (is_closer(text[i])) {
        ++i;
      } else if (size_t n = utf8_closer_length(text, i)) {
        i += n;
      } else {
        break;
      }
    }
    const size_t end = i;
    size_t next = i;
    while (next < text.size() && is_space(text[next])) ++next;
    if (next == i || !starts_sentence(text, next)) continue;
    if (single_period && period_is_abbreviation(text, first_mark)) continue;
    push_trimmed(out, text.substr(start, end - start));
    start = end;
  }
  push_trimmed(out, text.substr(start));
  return out;
}

}  // namespace megatron
