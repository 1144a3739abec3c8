// Transparent string hashing, so unordered maps keyed by std::string can be probed with a
// std::string_view (no temporary string per lookup on the tokenizers' hot paths).
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace megatron {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename Value>
using StringMap = std::unordered_map<std::string, Value, StringHash, std::equal_to<>>;

}  // namespace megatron
