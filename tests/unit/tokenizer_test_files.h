// Where tokenizer tests find their inputs: committed files under tests/data, the files that
// scripts/fetch_data.sh caches (see data/data_dir.h), and scratch files for bad-input tests.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

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

// A scratch directory removed with everything in it when the object goes away.
class ScratchDir {
 public:
  ScratchDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("megatron-test-" + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Writes contents to name inside the directory and returns its path.
  std::string write(const std::string& name, const std::string& contents) const {
    const std::filesystem::path path = path_ / name;
    std::ofstream(path, std::ios::binary) << contents;
    return path.string();
  }
  std::string path(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace megatron::testing
