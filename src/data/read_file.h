// Reading a whole (vocabulary, merges, model) file into memory with an error that names the
// flag the path came from.
#pragma once

#include <string>
#include <string_view>

namespace megatron {

// Contents of path; throws Error "<flag> '<path>' cannot be read: <reason>" on failure.
std::string read_file(const std::string& path, std::string_view flag);

}  // namespace megatron
