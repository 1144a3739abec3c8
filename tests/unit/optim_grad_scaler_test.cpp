// GradScaler's state machine, step by step, against Megatron's DynamicGradScaler rules.
#include <gtest/gtest.h>

#include "optim/grad_scaler.h"

namespace megatron {
namespace {

TEST(GradScaler, GrowsAfterWindowAndBacksOffAfterHysteresis) {
  GradScaler s({/*dynamic=*/true, /*initial=*/1024, /*min=*/1, /*window=*/3, /*hysteresis=*/2});
  EXPECT_EQ(s.scale(), 1024);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024);
  s.update(false);  // third clean step in a row
  EXPECT_EQ(s.scale(), 2048);
  s.update(true);  // hysteresis 2 → 1: scale kept
  EXPECT_EQ(s.scale(), 2048);
  s.update(true);  // hysteresis exhausted: halve
  EXPECT_EQ(s.scale(), 1024);
  s.update(true);  // stays exhausted (only growth refills it): halve again
  EXPECT_EQ(s.scale(), 512);
  s.update(false);
  s.update(false);
  s.update(true);  // resets the growth counter
  EXPECT_EQ(s.scale(), 256);
  s.update(false);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 512);
  s.update(true);  // hysteresis was refilled by the growth: kept
  EXPECT_EQ(s.scale(), 512);
}

TEST(GradScaler, NeverBelowMinimum) {
  GradScaler s({true, 4, 2, 1000, 1});
  s.update(true);
  EXPECT_EQ(s.scale(), 2);
  s.update(true);
  EXPECT_EQ(s.scale(), 2);
}

TEST(GradScaler, ConstantNeverChanges) {
  GradScaler s({false, 128, 1, 2, 1});
  for (int i = 0; i < 5; ++i) s.update(i % 2 == 0);
  EXPECT_EQ(s.scale(), 128);
}

TEST(GradScaler, DefaultsAreMegatrons) {
  GradScaler s({true, 4294967296.0, 1, 1000, 2});
  EXPECT_EQ(s.scale(), 4294967296.0);
  for (int i = 0; i < 999; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4294967296.0);
  s.update(false);
  EXPECT_EQ(s.scale(), 8589934592.0);
}

TEST(GradScaler, StateRoundTripContinuesIdentically) {
  GradScalerConfig c{true, 64, 1, 3, 2};
  GradScaler a(c);
  a.update(false);
  a.update(true);
  GradScaler b(c);
  b.load_state(a.state());
  for (bool inf : {true, false, false, false, true, true}) {
    a.update(inf);
    b.update(inf);
    EXPECT_EQ(a.scale(), b.scale());
  }
}

}  // namespace
}  // namespace megatron
