// GPT-2's bytes_to_unicode() and its inverse.
#include "data/tokenizers/byte_level.h"

#include <array>

#include "core/error.h"
#include "data/utf8.h"

namespace megatron {
namespace {

// bytes_to_unicode(): printable Latin-1 bytes stand for themselves; the other 68 bytes map,
// in byte order, to U+0100 onwards, so every byte has a visible, non-space character.
constexpr std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}
constexpr std::array<char32_t, 256> kByteToUnicode = make_byte_to_unicode();

}  // namespace

char32_t gpt2_byte_to_unicode(uint8_t byte) {
  return kByteToUnicode[byte];
}

std::string byte_level_token_bytes(std::string_view token, std::string_view file) {
  static const std::array<int, 512> unicode_to_byte = [] {
    std::array<int, 512> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[kByteToUnicode[b]] = b;
    return table;
  }();
  std::string bytes;
  size_t pos = 0;
  while (pos < token.size()) {
    const char32_t cp = next_code_point(token, pos);
    MT_REQUIRE(cp < unicode_to_byte.size() && unicode_to_byte[cp] >= 0, file, ": token '", token,
               "' has a character outside GPT-2's byte-to-unicode table");
    bytes += static_cast<char>(unicode_to_byte[cp]);
  }
  return bytes;
}

}  // namespace megatron
