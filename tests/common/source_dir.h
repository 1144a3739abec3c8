// Where the tests find the source tree (tests/data/...).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace megatron::testing {

// The source tree: MEGATRON_SOURCE_DIR (CTest sets it), else the path the unit tests were
// compiled with (so the binary also runs by hand).
inline std::string source_dir() {
  if (const char* env = std::getenv("MEGATRON_SOURCE_DIR")) return env;
#ifdef MEGATRON_TEST_SOURCE_DIR
  return MEGATRON_TEST_SOURCE_DIR;
#else
  ADD_FAILURE() << "MEGATRON_SOURCE_DIR must name the source tree (CTest sets it)";
  return ".";
#endif
}

}  // namespace megatron::testing
