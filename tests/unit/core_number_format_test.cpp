// python_float_repr against Python's repr(): the expected strings were printed by CPython 3.11
// (`python3 -c "print(repr(x))"`), not by this code.
#include <gtest/gtest.h>

#include <limits>

#include "core/number_format.h"

namespace megatron {
namespace {

TEST(PythonFloatRepr, MatchesCPython) {
  const std::pair<double, const char*> cases[] = {
      {0.9, "0.9"},
      {0.1, "0.1"},
      {1e-5, "1e-05"},
      {6e-05, "6e-05"},
      {0.0001, "0.0001"},
      {0.00012, "0.00012"},
      {1.0, "1.0"},
      {4294967296.0, "4294967296.0"},
      {1e16, "1e+16"},
      {1e15, "1000000000000000.0"},
      {123456789012345678.0, "1.2345678901234568e+17"},
      {-0.5, "-0.5"},
      {0.0, "0.0"},
      {2.5e-7, "2.5e-07"},
      {0.006, "0.006"},
      {1e-8, "1e-08"},
      {0.999, "0.999"},
      {-1e+22, "-1e+22"},
      {1.5e300, "1.5e+300"},
      {5e-324, "5e-324"},
      {1234567890123456.7, "1234567890123456.8"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(python_float_repr(value), expected);
  EXPECT_EQ(python_float_repr(std::numeric_limits<double>::infinity()), "inf");
}

}  // namespace
}  // namespace megatron
