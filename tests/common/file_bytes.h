// file_bytes(path): a file's whole content, for byte-for-byte comparisons of written files.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace megatron::testing {

// The bytes of `path`; empty when it cannot be read (the comparison then fails, naming it).
inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace megatron::testing
