// UTF-8 decoding by the table of well-formed byte sequences (Unicode 15, table 3-7).
#include "data/utf8.h"

#include <cstdint>

#include "core/error.h"

namespace megatron {

char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) {
    ++pos;
    return lead;
  }
  // Length and the allowed range of the second byte; the third and fourth are 80..BF.
  // The narrowed second-byte ranges exclude overlong forms, surrogates and > U+10FFFF.
  int length = 0;
  uint8_t second_lo = 0x80, second_hi = 0xBF;
  char32_t cp = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    cp = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    cp = lead & 0x0F;
    if (lead == 0xE0) second_lo = 0xA0;
    if (lead == 0xED) second_hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    cp = lead & 0x07;
    if (lead == 0xF0) second_lo = 0x90;
    if (lead == 0xF4) second_hi = 0x8F;
  } else {
    ++pos;  // 80..C1 and F5..FF never start a sequence
    return kInvalidCodePoint;
  }
  size_t i = pos + 1;
  for (int k = 1; k < length; ++k, ++i) {
    const uint8_t lo = k == 1 ? second_lo : 0x80;
    const uint8_t hi = k == 1 ? second_hi : 0xBF;
    if (i >= text.size() || byte(i) < lo || byte(i) > hi) {
      pos = i;  // the maximal subpart ends before the first byte that cannot continue it
      return kInvalidCodePoint;
    }
    cp = (cp << 6) | (byte(i) & 0x3F);
  }
  pos = i;
  return cp;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

size_t find_invalid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path: most text is ASCII, and a byte < 0x80 is always a whole code point.
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const size_t start = pos;
    if (next_code_point(text, pos) == kInvalidCodePoint) return start;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view text, std::string_view what) {
  const size_t bad = find_invalid_utf8(text);
  MT_REQUIRE(bad == std::string_view::npos, what, " is not valid UTF-8: ill-formed byte 0x",
             std::hex, static_cast<int>(static_cast<uint8_t>(text[bad])), std::dec,
             " at byte offset ", bad);
}

std::string replace_invalid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t start = pos;
    if (next_code_point(bytes, pos) == kInvalidCodePoint) {
      append_utf8(out, kReplacementCharacter);
    } else {
      out.append(bytes.substr(start, pos - start));
    }
  }
  return out;
}

}  // namespace megatron
