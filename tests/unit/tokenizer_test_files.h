// Where tokenizer tests find their inputs: committed files under tests/data, the files that
// scripts/fetch_data.sh caches (see data/data_dir.h), and (via TempDir) scratch files for
// bad-input tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "../common/temp_dir.h"
#include "data/data_dir.h"

namespace megatron::testing {

// $MEGATRON_SOURCE_DIR / relative; the source tree CMake configured when the variable is unset.
inline std::string source_file(const std::string& relative) {
  const char* root = std::getenv("MEGATRON_SOURCE_DIR");
  const std::filesystem::path path =
      std::filesystem::path(root ? root : MEGATRON_TEST_SOURCE_DIR) / relative;
  if (!std::filesystem::exists(path)) {
    throw std::runtime_error(path.string() + " not found; set MEGATRON_SOURCE_DIR to the repo");
  }
  return path.string();
}

// A file fetched by scripts/fetch_data.sh: from $MEGATRON_DATA_DIR, else from the directory
// fixed when CMake configured the tests (so a different HOME at test time does not matter).
inline std::string fetched_file(const std::string& name) {
  if (std::getenv("MEGATRON_DATA_DIR") == nullptr) {
    const std::filesystem::path path = std::filesystem::path(MEGATRON_TEST_DATA_DIR) / name;
    if (!std::filesystem::exists(path)) {
      throw std::runtime_error(path.string() + " not found; run scripts/fetch_data.sh first");
    }
    return path.string();
  }
  return fetched_data_file(name);
}

}  // namespace megatron::testing
