// replace_all: Python's str.replace(from, to) on a std::string, in place.
#pragma once

#include <string>
#include <string_view>

namespace megatron {

// Replaces every non-overlapping occurrence of `from` (not empty), scanning left to right.
void replace_all(std::string& text, std::string_view from, std::string_view to);

}  // namespace megatron
