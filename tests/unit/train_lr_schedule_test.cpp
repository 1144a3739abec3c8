// LrSchedule against values computed by hand from Megatron's formulas.
#include <gtest/gtest.h>

#include "core/error.h"
#include "train/lr_schedule.h"

namespace megatron {
namespace {

LrSchedule at(LrDecayStyle style, int64_t samples) {
  LrSchedule s({/*max_lr=*/1e-3, /*min_lr=*/1e-4, /*warmup=*/100, /*decay=*/1000, style});
  s.step(samples);
  return s;
}

TEST(LrSchedule, WarmupIsLinearFromZero) {
  EXPECT_DOUBLE_EQ(at(LrDecayStyle::Linear, 0).lr(), 0.0);
  EXPECT_DOUBLE_EQ(at(LrDecayStyle::Linear, 50).lr(), 5e-4);
  EXPECT_DOUBLE_EQ(at(LrDecayStyle::Cosine, 25).lr(), 2.5e-4);
  EXPECT_DOUBLE_EQ(at(LrDecayStyle::Constant, 100).lr(), 1e-3);
}

TEST(LrSchedule, LinearDecay) {
  // ratio (550 - 100) / 900 = 0.5: 1e-4 + 0.5 · 9e-4.
  EXPECT_NEAR(at(LrDecayStyle::Linear, 550).lr(), 5.5e-4, 1e-15);
  EXPECT_NEAR(at(LrDecayStyle::Linear, 325).lr(), 1e-4 + 0.75 * 9e-4, 1e-15);
  EXPECT_NEAR(at(LrDecayStyle::Linear, 1000).lr(), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(at(LrDecayStyle::Linear, 5000).lr(), 1e-4);
}

TEST(LrSchedule, CosineDecay) {
  // ratio 0.25: 0.5 · (cos(π/4) + 1) = 0.8535533905932737.
  EXPECT_NEAR(at(LrDecayStyle::Cosine, 325).lr(), 1e-4 + 0.8535533905932737 * 9e-4, 1e-15);
  EXPECT_NEAR(at(LrDecayStyle::Cosine, 550).lr(), 5.5e-4, 1e-15);
  EXPECT_NEAR(at(LrDecayStyle::Cosine, 1000).lr(), 1e-4, 1e-15);
}

TEST(LrSchedule, ConstantAfterWarmup) {
  EXPECT_DOUBLE_EQ(at(LrDecayStyle::Constant, 101).lr(), 1e-3);
  EXPECT_DOUBLE_EQ(at(LrDecayStyle::Constant, 99999).lr(), 1e-3);
}

TEST(LrSchedule, NoWarmupStartsAtMax) {
  LrSchedule s({1e-3, 0.0, 0, 800, LrDecayStyle::Linear});
  EXPECT_DOUBLE_EQ(s.lr(), 1e-3);
  s.step(200);
  EXPECT_NEAR(s.lr(), 7.5e-4, 1e-15);
}

TEST(LrSchedule, StateRoundTrip) {
  LrSchedule a = at(LrDecayStyle::Cosine, 640);
  LrSchedule b({1e-3, 1e-4, 100, 1000, LrDecayStyle::Cosine});
  b.load_state(a.state());
  EXPECT_EQ(b.num_steps(), 640);
  EXPECT_DOUBLE_EQ(b.lr(), a.lr());
}

TEST(LrSchedule, RejectsBadConfig) {
  EXPECT_THROW(LrSchedule({1e-4, 1e-3, 0, 100, LrDecayStyle::Linear}), Error);
  EXPECT_THROW(LrSchedule({1e-3, 0, 100, 100, LrDecayStyle::Linear}), Error);
  EXPECT_THROW(lr_decay_style_from_name("exponential"), Error);
}

}  // namespace
}  // namespace megatron
