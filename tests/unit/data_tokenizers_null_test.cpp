// NullTokenizer: ids in, ids out; EOD is the last id.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/tokenizers/null_tokenizer.h"

namespace megatron {
namespace {

TEST(NullTokenizer, ParsesWhitespaceSeparatedIds) {
  const NullTokenizer tokenizer(100);
  EXPECT_EQ(tokenizer.vocab_size(), 100);
  EXPECT_EQ(tokenizer.eod(), 99);
  EXPECT_EQ(tokenizer.encode("  3 14\t15\n92 0 99 "), (std::vector<int32_t>{3, 14, 15, 92, 0, 99}));
  EXPECT_TRUE(tokenizer.encode(" \n").empty());
  EXPECT_EQ(tokenizer.decode({3, 14, 15}), "3 14 15");
  EXPECT_EQ(tokenizer.encode(tokenizer.decode({7, 0, 99})), (std::vector<int32_t>{7, 0, 99}));
}

TEST(NullTokenizer, RejectsWordsThatAreNotIds) {
  const NullTokenizer tokenizer(100);
  for (const char* bad : {"1 100", "1 -1", "1 x", "1 2x", "1.5", "99999999999999999999"}) {
    EXPECT_THROW(tokenizer.encode(bad), Error) << bad;
  }
  try {
    tokenizer.encode("5 abc");
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("'abc' at byte 2"), std::string::npos) << e.message();
  }
  EXPECT_THROW(NullTokenizer(0), Error);
}

}  // namespace
}  // namespace megatron
