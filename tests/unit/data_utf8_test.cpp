// UTF-8 helpers: expected replacements are Python's bytes.decode("utf-8", errors="replace").
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/utf8.h"

namespace megatron {
namespace {

TEST(Utf8, DecodesEveryLength) {
  const std::string text = "a\u00e9\u20ac\U0001F600";
  size_t pos = 0;
  EXPECT_EQ(next_code_point(text, pos), U'a');
  EXPECT_EQ(next_code_point(text, pos), U'\u00e9');
  EXPECT_EQ(next_code_point(text, pos), U'\u20ac');
  EXPECT_EQ(next_code_point(text, pos), U'\U0001F600');
  EXPECT_EQ(pos, text.size());
}

TEST(Utf8, EncodeDecodeRoundTripsAllScalarValues) {
  for (char32_t cp = 0; cp < 0x110000; cp += (cp < 0x3000 ? 1 : 97)) {
    if (cp >= 0xD800 && cp < 0xE000) continue;  // surrogates are not scalar values
    std::string s;
    append_utf8(s, cp);
    size_t pos = 0;
    ASSERT_EQ(next_code_point(s, pos), cp);
    ASSERT_EQ(pos, s.size());
  }
}

TEST(Utf8, ReplacesMaximalSubpartsLikePython) {
  const std::string r = "\uFFFD";
  EXPECT_EQ(replace_invalid_utf8("\xe2\x82"), r);              // truncated: one subpart
  EXPECT_EQ(replace_invalid_utf8("\xf0\x80\x80"), r + r + r);  // overlong: byte by byte
  EXPECT_EQ(replace_invalid_utf8("\xed\xa0\x80"), r + r + r);  // surrogate
  EXPECT_EQ(replace_invalid_utf8("\xc0\xaf"), r + r);          // C0 never leads
  EXPECT_EQ(replace_invalid_utf8("a\xff"
                                 "b"),
            "a" + r + "b");
  EXPECT_EQ(replace_invalid_utf8("\xf4\x90\x80\x80"), r + r + r + r);  // > U+10FFFF
  EXPECT_EQ(replace_invalid_utf8("\xe2\x82\xac\xe2"), "\u20ac" + r);
  EXPECT_EQ(replace_invalid_utf8("plain \u00e9"), "plain \u00e9");
}

TEST(Utf8, FindsFirstInvalidByte) {
  EXPECT_EQ(find_invalid_utf8("abc\u00e9"), std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("ab\xe2\x82"), 2u);
  EXPECT_EQ(find_invalid_utf8("\x80"), 0u);
  EXPECT_THROW(check_utf8("ab\xc3", "document"), Error);
}

}  // namespace
}  // namespace megatron
