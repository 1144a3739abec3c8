// Philox4x32-10 against the known-answer vectors published with Random123 (kat_vectors).
#include "core/philox.h"

#include <gtest/gtest.h>

namespace megatron {
namespace {

TEST(Philox, KnownAnswerZero) {
  PhiloxCounter out = philox4x32_10({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(out, (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
}

TEST(Philox, KnownAnswerAllOnes) {
  PhiloxCounter out = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                    {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(out, (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
}

TEST(Philox, KnownAnswerPi) {
  PhiloxCounter out = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                                    {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(out, (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, StreamDrawsAreAddressable) {
  PhiloxStream s(1234, 99);
  PhiloxCounter b = s.block(7);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(s.u32(28 + j), b[j]);
  EXPECT_NE(PhiloxStream(1234, 100).u32(28), s.u32(28));
}

}  // namespace
}  // namespace megatron
