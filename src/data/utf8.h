// UTF-8 helpers shared by the tokenizers: decoding one code point, encoding one, and
// Python's decode(errors="replace") for byte strings that tokens concatenate into.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace megatron {

inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFFu;
inline constexpr char32_t kReplacementCharacter = 0xFFFDu;

// Decodes the code point starting at text[pos] and advances pos past it. On an ill-formed
// sequence returns kInvalidCodePoint and advances past its maximal subpart (Unicode 3.9,
// "U+FFFD substitution of maximal subparts"), so callers never loop forever.
char32_t next_code_point(std::string_view text, size_t& pos);

// Appends the UTF-8 encoding of cp (which must be a Unicode scalar value) to out.
void append_utf8(std::string& out, char32_t cp);

// Byte offset of the first ill-formed sequence in text, or std::string_view::npos.
size_t find_invalid_utf8(std::string_view text);

// Throws Error naming `what` and the byte offset when text is not well-formed UTF-8.
void check_utf8(std::string_view text, std::string_view what);

// bytes with every maximal ill-formed subpart replaced by U+FFFD, exactly as Python's
// bytes.decode("utf-8", errors="replace") (what GPT-2's decoder does).
std::string replace_invalid_utf8(std::string_view bytes);

}  // namespace megatron
