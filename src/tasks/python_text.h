// Python's str semantics that Megatron's task code relies on, on UTF-8 text: what counts as
// whitespace (str.isspace, and `\s` of Python's `re` for str patterns), str.strip() and
// str.split() without arguments. Byte offsets and code-point offsets pick out the same
// substrings, so working on the UTF-8 bytes gives Python's results exactly.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace megatron {

// str.isspace() of one code point: \t \n \v \f \r, U+001C–U+001F, space, U+0085, U+00A0,
// U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F, U+3000 (Unicode 14, Python 3.11).
bool is_python_space(char32_t cp);

// A PCRE2 character class (UTF mode) matching exactly is_python_space: Python's `\s`.
// PCRE2's own `\s` (even with UCP) misses U+001C–U+001F.
const std::string& python_space_class();

// text.strip(): without leading and trailing whitespace. text must be valid UTF-8.
std::string_view python_strip(std::string_view text);

// text.split(): the runs of non-whitespace, in order. text must be valid UTF-8.
std::vector<std::string_view> python_split(std::string_view text);

}  // namespace megatron
