// --split parsing and Megatron's train/valid/test boundaries, against hand-computed values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/error.h"
#include "data/split.h"

namespace megatron {
namespace {

using Bounds = std::array<int64_t, 4>;

TEST(DataSplit, BoundariesMatchHandComputedMegatronRounding) {
  // 0.949 · 10 = 9.49 -> 9; 0.999 · 10 = 9.99 -> 10.
  EXPECT_EQ(split_boundaries("949,50,1", 10), (Bounds{0, 9, 10, 10}));
  // 0.9 · 233 = 209.7 -> 210 (the older rule gave 209).
  EXPECT_EQ(split_boundaries("90,5,5", 233), (Bounds{0, 210, 221, 233}));
  // 0.5 · 5 = 2.5 -> 2 (ties to even).
  EXPECT_EQ(split_boundaries("1,1,0", 5), (Bounds{0, 2, 5, 5}));
  EXPECT_EQ(split_boundaries("80/20", 10), (Bounds{0, 8, 10, 10}));
  EXPECT_EQ(split_boundaries("100", 17), (Bounds{0, 17, 17, 17}));
}

// tests/data/split_golden.txt: Megatron's formula evaluated by numpy and Python
// (tools/reference/megatron_split.py) on 14 split strings x 16 corpus sizes.
TEST(DataSplit, BoundariesMatchMegatronsFormulaComputedByPython) {
  std::ifstream golden(std::string(MEGATRON_TEST_SOURCE_DIR) + "/tests/data/split_golden.txt");
  ASSERT_TRUE(golden.good());
  std::string split;
  int64_t size = 0;
  Bounds expected{};
  int cases = 0;
  while (golden >> split >> size >> expected[0] >> expected[1] >> expected[2] >> expected[3]) {
    EXPECT_EQ(split_boundaries(split, size), expected) << "--split " << split << " on " << size;
    ++cases;
  }
  EXPECT_EQ(cases, 14 * 16);
}

TEST(DataSplit, BadStringsAreRejectedWithTheirName) {
  EXPECT_THAT([] { parse_split("a,b"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("--split 'a,b': 'a'")));
  EXPECT_THAT([] { parse_split("1,2,3,4"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("has 4 parts")));
  EXPECT_THAT([] { parse_split("0,0,0"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("sums to 0")));
  EXPECT_THAT([] { parse_split("-1,2"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("'-1' is not a non-negative")));
  EXPECT_THAT([] { parse_split("1,,2"); },
              ::testing::ThrowsMessage<Error>(::testing::HasSubstr("'' is not")));
}

}  // namespace
}  // namespace megatron
