// read_file: std::ifstream into a string, with the reason in the error message.
#include "data/read_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace megatron {

std::string read_file(const std::string& path, std::string_view flag) {
  MT_REQUIRE(!path.empty(), flag, " is required but was not given");
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    MT_THROW(flag, " '", path, "' cannot be read: no such file");
  }
  if (!std::filesystem::is_regular_file(status)) {
    MT_THROW(flag, " '", path, "' cannot be read: not a regular file");
  }
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) MT_THROW(flag, " '", path, "' cannot be read: ", std::strerror(errno));
  std::string contents((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MT_REQUIRE(!in.bad(), flag, " '", path, "' cannot be read: I/O error");
  return contents;
}

}  // namespace megatron
