// LrSchedule against values computed by hand from Megatron's formulas, and against Megatron's
// own OptimizerParamScheduler (tests/data/lr_schedule_golden.txt, written by
// tools/reference/megatron_lr_schedule.py).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "optim/lr_schedule.h"

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

TEST(LrSchedule, MatchesMegatronsScheduler) {
  std::ifstream golden(std::string(MEGATRON_TEST_SOURCE_DIR) +
                       "/tests/data/lr_schedule_golden.txt");
  ASSERT_TRUE(golden.good());
  std::string line;
  int cases = 0;
  while (std::getline(golden, line)) {
    std::istringstream in(line);
    std::string style, wsd_style, wd_style;
    LrScheduleConfig c;
    int64_t steps = 0;
    double lr = 0, wd = 0;
    in >> style >> c.warmup_steps >> c.decay_steps >> c.init_lr >> c.max_lr >> c.min_lr >>
        c.wsd_decay_steps >> wsd_style >> c.start_wd >> c.end_wd >> c.wd_incr_steps >> wd_style >>
        steps >> lr >> wd;
    ASSERT_FALSE(in.fail()) << line;
    c.style = lr_decay_style_from_name(style);
    c.wsd_style = wsd_decay_style_from_name(wsd_style);
    c.wd_style = weight_decay_incr_style_from_name(wd_style);
    LrSchedule s(c);
    s.step(steps);
    // Same formulas, same double operations in a different language: a few ulps at most.
    EXPECT_NEAR(s.lr(), lr, 1e-15 * lr + 1e-20) << line;
    EXPECT_NEAR(s.wd(), wd, 1e-15 * wd + 1e-20) << line;
    ++cases;
  }
  EXPECT_EQ(cases, 230);
}

TEST(LrSchedule, RejectsBadConfig) {
  EXPECT_THROW(LrSchedule({1e-4, 1e-3, 0, 100, LrDecayStyle::Linear}), Error);
  EXPECT_THROW(LrSchedule({1e-3, 0, 100, 100, LrDecayStyle::Linear}), Error);
  EXPECT_THROW(lr_decay_style_from_name("exponential"), Error);
}

}  // namespace
}  // namespace megatron
