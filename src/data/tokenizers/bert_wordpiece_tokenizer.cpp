// BERT basic + WordPiece tokenization. Character classes follow tokenization.py's
// _is_whitespace / _is_control / _is_punctuation / _is_chinese_char; Unicode properties and
// NFD come from utf8proc.
#include "data/tokenizers/bert_wordpiece_tokenizer.h"

#include <utf8proc.h>

#include <cctype>
#include <cstdlib>
#include <memory>

#include "core/error.h"
#include "data/read_file.h"
#include "data/tokenizers/clean_up_tokenization.h"
#include "data/utf8.h"

namespace megatron {
namespace {

utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}

// Characters that separate words after clean-up. Python's str.split() (whitespace_tokenize)
// also splits on U+2028/U+2029, the only isspace() characters that survive clean-up.
bool is_whitespace(char32_t cp) {
  return cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r' || cp == 0x2028 || cp == 0x2029 ||
         category(cp) == UTF8PROC_CATEGORY_ZS;
}

bool is_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF;
}

// All non-alphanumeric ASCII counts (so $ + < = > ^ ` | ~ split too), plus Unicode P*.
bool is_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126)) {
    return true;
  }
  const auto c = category(cp);
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

// The CJK Unified Ideographs blocks BERT isolates (not Hangul, kana or CJK punctuation).
bool is_cjk_ideograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Cased and Case_Ignorable (Unicode 3.13), as far as Python's final-sigma rule needs them.
bool is_cased(char32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}
bool is_case_ignorable(char32_t cp) {
  const auto c = category(cp);
  return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK || cp == '\'' || cp == '.' ||
         cp == ':' || cp == 0x00B7 || cp == 0x2018 || cp == 0x2019 || cp == 0x2024 || cp == 0x2027;
}

std::vector<char32_t> code_points(std::string_view text) {
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) cps.push_back(next_code_point(text, pos));
  return cps;
}

// Python's str.lower(): simple lower-case mappings plus the two context rules it applies:
// U+0130 -> "i" + U+0307, and capital sigma -> final sigma at the end of a cased word.
std::string lower(std::string_view word) {
  const std::vector<char32_t> cps = code_points(word);
  std::string out;
  out.reserve(word.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t cp = cps[i];
    if (cp == 0x0130) {
      out += "i\u0307";
    } else if (cp == 0x03A3) {
      size_t before = i;
      while (before > 0 && is_case_ignorable(cps[before - 1])) --before;
      size_t after = i + 1;
      while (after < cps.size() && is_case_ignorable(cps[after])) ++after;
      const bool final_sigma =
          before > 0 && is_cased(cps[before - 1]) && !(after < cps.size() && is_cased(cps[after]));
      append_utf8(out, final_sigma ? 0x03C2 : 0x03C3);
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
  }
  return out;
}

// NFD, then every nonspacing mark (Mn) removed: "Héllo" -> "Hello".
std::string strip_accents(std::string_view word) {
  utf8proc_uint8_t* nfd = nullptr;
  const utf8proc_ssize_t length =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(word.data()),
                   static_cast<utf8proc_ssize_t>(word.size()), &nfd,
                   static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | UTF8PROC_STABLE));
  MT_CHECK(length >= 0, "NFD normalization failed: ", utf8proc_errmsg(length));
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(nfd, &std::free);
  const std::string_view decomposed(reinterpret_cast<const char*>(nfd), length);
  std::string out;
  out.reserve(decomposed.size());
  for (size_t pos = 0; pos < decomposed.size();) {
    const size_t start = pos;
    if (category(next_code_point(decomposed, pos)) != UTF8PROC_CATEGORY_MN) {
      out.append(decomposed.substr(start, pos - start));
    }
  }
  return out;
}

bool is_ascii(std::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// Python's str.strip() for the ASCII whitespace a vocab.txt line can end with.
std::string_view strip(std::string_view s) {
  constexpr std::string_view kSpace = " \t\r\n\v\f";
  const size_t first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

BertWordPieceTokenizer::BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case)
    : lower_case_(lower_case) {
  // vocab.txt: one entry per line; the id is the line number - 1.
  const std::string text = read_file(vocab_file, "--vocab-file");
  check_utf8(text, "--vocab-file '" + vocab_file + "'");
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    const std::string_view entry =
        strip(std::string_view(text).substr(line_start, line_end - line_start));
    line_start = line_end + 1;
    const auto id = static_cast<int32_t>(tokens_.size());
    const auto [it, inserted] = ids_.emplace(std::string(entry), id);
    MT_REQUIRE(inserted, "--vocab-file '", vocab_file, "' line ", id + 1, " repeats token '", entry,
               "' of line ", it->second + 1, "; expected one token per line, each once");
    tokens_.emplace_back(entry);
    std::string_view bare = entry;
    if (bare.starts_with("##")) bare.remove_prefix(2);
    max_token_chars_ = std::max(max_token_chars_, count_code_points(bare));
  }
  MT_REQUIRE(!tokens_.empty(), "--vocab-file '", vocab_file, "' is empty");
  unk_ = required_id("[UNK]", vocab_file);
  cls_ = required_id("[CLS]", vocab_file);
  sep_ = required_id("[SEP]", vocab_file);
  mask_ = required_id("[MASK]", vocab_file);
  pad_ = required_id("[PAD]", vocab_file);
}

int32_t BertWordPieceTokenizer::required_id(const std::string& token,
                                            const std::string& vocab_file) const {
  auto it = ids_.find(token);
  MT_REQUIRE(it != ids_.end(), "--vocab-file '", vocab_file, "' has no ", token,
             " token; a BERT vocab.txt needs [UNK] [CLS] [SEP] [MASK] [PAD]");
  return it->second;
}

const std::string& BertWordPieceTokenizer::token(int32_t id) const {
  MT_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is outside the vocabulary [0, ",
           vocab_size(), ")");
  return tokens_[id];
}

std::vector<int32_t> BertWordPieceTokenizer::encode(std::string_view text) const {
  check_utf8(text, "text to encode");
  std::vector<int32_t> ids;
  std::string word;  // the current whitespace-delimited word, control characters removed
  const auto flush = [&] {
    if (!word.empty()) encode_word(word, ids);
    word.clear();
  };
  for (size_t pos = 0; pos < text.size();) {
    const size_t start = pos;
    const char32_t cp = next_code_point(text, pos);
    if (cp == 0 || cp == kReplacementCharacter || is_control(cp)) continue;
    if (is_whitespace(cp)) {
      flush();
    } else if (is_cjk_ideograph(cp)) {
      flush();
      word = text.substr(start, pos - start);
      flush();
    } else {
      word.append(text.substr(start, pos - start));
    }
  }
  flush();
  return ids;
}

void BertWordPieceTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  // Long words are rare and would crowd the cache out.
  constexpr size_t kMaxCachedWordBytes = 256;
  if (word.size() > kMaxCachedWordBytes) return tokenize_word(word, out);
  const size_t hash = StringHash{}(word);
  if (cache_.find(word, hash, out)) return;
  std::vector<int32_t> ids;
  tokenize_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  cache_.insert(word, hash, std::move(ids));
}

void BertWordPieceTokenizer::tokenize_word(std::string_view word, std::vector<int32_t>& out) const {
  std::string normalized;
  if (lower_case_) {
    if (is_ascii(word)) {
      // The common case: ASCII lower-cases byte by byte and has no accents to strip.
      normalized = word;
      for (char& c : normalized) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      normalized = strip_accents(lower(word));
    }
    word = normalized;
  }
  // Split off every punctuation character; the runs between them are WordPiece'd.
  size_t piece_start = 0;
  for (size_t pos = 0; pos < word.size();) {
    const size_t start = pos;
    if (is_punctuation(next_code_point(word, pos))) {
      if (start > piece_start) wordpiece(word.substr(piece_start, start - piece_start), out);
      wordpiece(word.substr(start, pos - start), out);
      piece_start = pos;
    }
  }
  if (word.size() > piece_start) wordpiece(word.substr(piece_start), out);
}

void BertWordPieceTokenizer::wordpiece(std::string_view piece, std::vector<int32_t>& out) const {
  // offsets: [n + 1] byte offset of each code point, plus the end.
  std::vector<size_t> offsets;
  for (size_t pos = 0; pos < piece.size(); next_code_point(piece, pos)) offsets.push_back(pos);
  const size_t n = offsets.size();
  offsets.push_back(piece.size());
  if (n > kMaxWordChars) {
    out.push_back(unk_);
    return;
  }
  const size_t first_out = out.size();
  std::string candidate;  // "##" + substring for continuations
  for (size_t start = 0; start < n;) {
    // Longest vocabulary entry starting at `start`; no entry is longer than max_token_chars_.
    size_t end = std::min(n, start + max_token_chars_);
    int32_t found = -1;
    for (; end > start; --end) {
      const std::string_view sub = piece.substr(offsets[start], offsets[end] - offsets[start]);
      auto it = ids_.end();
      if (start == 0) {
        it = ids_.find(sub);
      } else {
        candidate.assign("##").append(sub);
        it = ids_.find(candidate);
      }
      if (it != ids_.end()) {
        found = it->second;
        break;
      }
    }
    if (found < 0) {
      out.resize(first_out);  // one unmatched position makes the whole word [UNK]
      out.push_back(unk_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::string BertWordPieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) {
    const std::string& t = token(id);
    if (t.starts_with("##") && !text.empty()) {
      text.append(t, 2);
    } else {
      if (!text.empty()) text += ' ';
      text += t;
    }
  }
  return clean_up_tokenization(std::move(text));
}

}  // namespace megatron
