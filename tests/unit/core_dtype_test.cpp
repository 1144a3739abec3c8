// DType names and the bf16 / f16 storage types: round to nearest even, ties, NaN, inf.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace megatron {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(DType, NamesAndSizesRoundTrip) {
  for (DType t :
       {DType::F32, DType::F64, DType::BF16, DType::F16, DType::I32, DType::I64, DType::U8})
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::I64), 8u);
  try {
    dtype_from_name("fp32");
    ADD_FAILURE() << "unknown name accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("'fp32'"), std::string::npos) << e.message();
  }
}

TEST(Bf16, RoundsToNearestEvenIncludingTies) {
  EXPECT_EQ(bf16(from_bits(0x3f808000u)).bits, 0x3f80);  // tie -> even (down)
  EXPECT_EQ(bf16(from_bits(0x3f818000u)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16(from_bits(0x3f807fffu)).bits, 0x3f80);  // below tie
  EXPECT_EQ(bf16(from_bits(0x3f808001u)).bits, 0x3f81);  // above tie
  EXPECT_EQ(bf16(from_bits(0x7f7fffffu)).bits, 0x7f80);  // overflow to inf
  EXPECT_EQ(bf16(-INFINITY).bits, 0xff80);
  EXPECT_EQ(float(bf16(1.5f)), 1.5f);
  EXPECT_EQ(float(bf16(-0.f)), 0.f);
  EXPECT_TRUE(std::signbit(float(bf16(-0.f))));
}

TEST(Bf16, NaNStaysNaNEvenWhenRoundingWouldCarry) {
  // 0x7fffffff would round up into the sign bit if NaN were not special-cased.
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0xffffffffu}) {
    const bf16 b(from_bits(u));
    EXPECT_TRUE(std::isnan(float(b))) << std::hex << u;
  }
}

TEST(F16, RoundsToNearestEvenWithSubnormalsAndInf) {
  EXPECT_EQ(f16(1.f).bits, 0x3c00);
  EXPECT_EQ(f16(65504.f).bits, 0x7bff);  // max finite
  EXPECT_EQ(f16(65520.f).bits, 0x7c00);  // tie at max rounds to inf
  EXPECT_EQ(f16(65519.f).bits, 0x7bff);
  EXPECT_EQ(f16(from_bits(0x33800000u)).bits, 0x0001);  // 2^-24: smallest subnormal
  EXPECT_EQ(f16(from_bits(0x33000000u)).bits, 0x0000);  // 2^-25: tie -> even (0)
  EXPECT_EQ(f16(from_bits(0x33c00000u)).bits, 0x0002);  // 1.5·2^-24: tie -> even (2)
  EXPECT_EQ(f16(1.f + 1.f / 2048).bits, 0x3c00);        // tie -> even
  EXPECT_EQ(f16(1.f + 3.f / 2048).bits, 0x3c02);
  EXPECT_EQ(float(f16(from_bits(0x38800000u))), from_bits(0x38800000u));  // 2^-14
  EXPECT_TRUE(std::isnan(float(f16(NAN))));
  EXPECT_EQ(float(f16(-INFINITY)), -INFINITY);
}

}  // namespace
}  // namespace megatron
