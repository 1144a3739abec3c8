// --split parsing and Megatron's train/valid/test boundaries, against hand-computed values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/split.h"

namespace megatron {
namespace {

using Bounds = std::array<int64_t, 4>;

TEST(DataSplit, BoundariesMatchHandComputedMegatronRounding) {
  EXPECT_EQ(split_boundaries("949,50,1", 1000), (Bounds{0, 949, 999, 1000}));
  // 9.49 -> 9, 0.5 -> 0 (ties to even), 0.01 -> 0; the missing 1 is added to every boundary.
  EXPECT_EQ(split_boundaries("949,50,1", 10), (Bounds{0, 10, 10, 10}));
  // 7/3 = 2.33 each -> [0, 2, 4, 6], shifted by the shortfall of 1.
  EXPECT_EQ(split_boundaries("1,1,1", 7), (Bounds{0, 3, 5, 7}));
  // 2.5 -> 2 twice (ties to even) -> [0, 2, 4, 4] + 1.
  EXPECT_EQ(split_boundaries("1,1,0", 5), (Bounds{0, 3, 5, 5}));
  // 1.5 -> 2 twice -> [0, 2, 4, 4], excess 1 taken off.
  EXPECT_EQ(split_boundaries("1,1", 3), (Bounds{0, 1, 3, 3}));
  EXPECT_EQ(split_boundaries("80/20", 10), (Bounds{0, 8, 10, 10}));
  EXPECT_EQ(split_boundaries("100", 17), (Bounds{0, 17, 17, 17}));
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
