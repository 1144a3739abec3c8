// Philox4x32-10 against the known-answer vectors published with Random123 (kat_vectors).
#include <gtest/gtest.h>

#include <cmath>

#include "core/philox.h"

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

TEST(Philox, NormalHasStandardMoments) {
  // 200k draws: the sample moments E[x^k] have sd sqrt(Var(x^k) / n), with Var(x) = 1,
  // Var(x²) = 2, Var(x³) = 15, Var(x⁴) = 96, i.e. 0.0022, 0.0032, 0.0087, 0.022; allow 5 sigma.
  const PhiloxStream s(2024, 7);
  const int n = 200000;
  double m1 = 0, m2 = 0, m3 = 0, m4 = 0;
  int beyond3 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = s.normal(uint64_t(i));
    ASSERT_TRUE(std::isfinite(x));
    m1 += x;
    m2 += x * x;
    m3 += x * x * x;
    m4 += x * x * x * x;
    beyond3 += std::abs(x) > 3;
  }
  m1 /= n, m2 /= n, m3 /= n, m4 /= n;
  EXPECT_NEAR(m1, 0.0, 5 * 0.0022);
  EXPECT_NEAR(m2, 1.0, 5 * 0.0032);
  EXPECT_NEAR(m3, 0.0, 5 * 0.0087);
  EXPECT_NEAR(m4, 3.0, 5 * 0.022);
  // P(|x| > 3) = 0.0027: 540 expected, sd ~23.
  EXPECT_NEAR(beyond3, 540, 5 * 23);
}

}  // namespace
}  // namespace megatron
