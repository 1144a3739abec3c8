// as_written: floats become the shortest decimal that rounds to them, as users type them.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/decimal.h"

namespace megatron {
namespace {

TEST(Decimal, FloatsAreWrittenAsTyped) {
  EXPECT_EQ(as_written(0.1f), 0.1);
  EXPECT_EQ(as_written(1e-5f), 1e-5);
  EXPECT_EQ(as_written(0.02f), 0.02);
  EXPECT_EQ(as_written(1e-12f), 1e-12);
  EXPECT_EQ(as_written(0.0f), 0.0);
  EXPECT_EQ(float(as_written(3.14159274f)), 3.14159274f);  // still the same float
  EXPECT_EQ(nlohmann::json(as_written(0.1f)).dump(), "0.1");
  EXPECT_NE(nlohmann::json(0.1f).dump(), "0.1");  // why it exists
}

}  // namespace
}  // namespace megatron
