// LrSchedule against values computed by hand from Megatron's formulas, and against Megatron's
// own OptimizerParamScheduler (tests/data/lr_schedule_golden.txt, written by
// tools/reference/megatron_lr_schedule.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

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

// --decoupled-lr 2e-3 --decoupled-min-lr 5e-5: the same warmup and decay between its own
// bounds (Megatron's param-group max_lr / min_lr in get_lr); without it, nullopt.
TEST(LrSchedule, DecoupledLrHasItsOwnPeakAndFloor) {
  LrScheduleConfig c{/*max_lr=*/1e-3, /*min_lr=*/1e-4, /*warmup=*/100, /*decay=*/1000,
                     LrDecayStyle::Linear};
  EXPECT_FALSE(LrSchedule(c).decoupled_lr().has_value());
  c.decoupled_max_lr = 2e-3;
  c.decoupled_min_lr = 5e-5;
  auto decoupled_at = [&](int64_t samples, std::optional<double> min = 5e-5) {
    LrScheduleConfig d = c;
    d.decoupled_min_lr = min;
    LrSchedule s(d);
    s.step(samples);
    return *s.decoupled_lr();
  };
  EXPECT_DOUBLE_EQ(decoupled_at(50), 1e-3);                           // warmup: half of 2e-3
  EXPECT_NEAR(decoupled_at(550), 5e-5 + 0.5 * (2e-3 - 5e-5), 1e-15);  // half-way down
  EXPECT_DOUBLE_EQ(decoupled_at(5000), 5e-5);                         // its own floor
  EXPECT_DOUBLE_EQ(decoupled_at(5000, std::nullopt), 1e-4);           // default: --min-lr
  LrSchedule main(c);
  main.step(550);
  EXPECT_NEAR(main.lr(), 5.5e-4, 1e-15);  // the other parameters' schedule is unchanged
}

// --use-mup at width multiplier 4: the hidden matrices' rate runs between --lr / 4 and
// --min-lr / 4 on the same warmup (from --lr-warmup-init, shared as in Megatron's scheduler)
// and decay; at multiplier 1 there is no such group (nullopt), as Megatron adds none.
TEST(LrSchedule, MupHiddenLrIsTheScheduleOverTheWidth) {
  LrScheduleConfig c{/*max_lr=*/1e-3, /*min_lr=*/1e-4, /*warmup=*/100, /*decay=*/1000,
                     LrDecayStyle::Linear};
  EXPECT_FALSE(LrSchedule(c).mup_hidden_lr().has_value());
  c.mup_width_mult = 4.0;
  c.init_lr = 1e-5;
  auto hidden_at = [&](int64_t samples) {
    LrSchedule s(c);
    s.step(samples);
    return *s.mup_hidden_lr();
  };
  EXPECT_DOUBLE_EQ(hidden_at(0), 1e-5);                                  // shared init
  EXPECT_NEAR(hidden_at(50), 1e-5 + 0.5 * (2.5e-4 - 1e-5), 1e-15);       // warmup
  EXPECT_NEAR(hidden_at(550), 2.5e-5 + 0.5 * (2.5e-4 - 2.5e-5), 1e-15);  // half-way down
  EXPECT_DOUBLE_EQ(hidden_at(5000), 2.5e-5);                             // --min-lr / 4
  LrSchedule main(c);
  main.step(550);
  EXPECT_NEAR(main.lr(), 5.5e-4, 1e-15);  // the other parameters' schedule is unchanged
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
  b.load_state(a.state(), ScheduleRestore::kCheck);
  EXPECT_EQ(b.num_steps(), 640);
  EXPECT_EQ(b.lr(), a.lr());
}

// The settings of a run with --lr 1e-3, --min-lr 1e-4, 100 warmup and 1000 decay samples,
// cosine, weight decay 0.01 → 0.1 linearly over 2000 samples.
LrScheduleConfig checkpointed_settings() {
  LrScheduleConfig c{1e-3, 1e-4, 100, 1000, LrDecayStyle::Cosine};
  c.wd_style = WeightDecayIncrStyle::Linear;
  c.start_wd = 0.01;
  c.end_wd = 0.1;
  c.wd_incr_steps = 2000;
  return c;
}

// Its checkpoint after 640 samples.
nlohmann::json checkpoint_schedule() {
  LrSchedule s(checkpointed_settings());
  s.step(640);
  return s.state();
}

// Megatron's default (neither flag): every setting must equal the checkpoint's; the error
// names the setting, both values and the two flags that resolve it.
TEST(LrSchedule, ResumeChecksEverySettingAgainstTheCheckpoint) {
  const LrScheduleConfig same = checkpointed_settings();
  LrSchedule ok(same);
  ok.load_state(checkpoint_schedule(), ScheduleRestore::kCheck);
  EXPECT_EQ(ok.num_steps(), 640);

  struct Change {
    std::function<void(LrScheduleConfig&)> apply;
    std::string message;
  };
  const std::vector<Change> changes = {
      {[](LrScheduleConfig& c) { c.max_lr = 2e-3; }, "has --lr 0.001, the command line 0.002"},
      {[](LrScheduleConfig& c) { c.min_lr = 0; }, "has --min-lr 0.0001, the command line 0.0"},
      {[](LrScheduleConfig& c) { c.warmup_steps = 50; }, "warmup samples (--lr-warmup-*) 100.0"},
      {[](LrScheduleConfig& c) { c.decay_steps = 2000; }, "else the run's length) 1000, the"},
      {[](LrScheduleConfig& c) { c.style = LrDecayStyle::Linear; },
       "has --lr-decay-style cosine, the command line linear"},
      {[](LrScheduleConfig& c) { c.start_wd = 0.02; }, "--start-weight-decay 0.01, the"},
      {[](LrScheduleConfig& c) { c.end_wd = 0.2; }, "--end-weight-decay 0.1, the"},
      {[](LrScheduleConfig& c) { c.wd_incr_steps = 4000; }, "samples (the run's length) 2000"},
      {[](LrScheduleConfig& c) { c.wd_style = WeightDecayIncrStyle::Cosine; },
       "--weight-decay-incr-style linear, the command line cosine"},
  };
  for (const Change& change : changes) {
    LrScheduleConfig c = same;
    change.apply(c);
    LrSchedule s(c);
    try {
      s.load_state(checkpoint_schedule(), ScheduleRestore::kCheck);
      ADD_FAILURE() << "no error for: " << change.message;
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(change.message), std::string::npos) << what;
      EXPECT_NE(what.find("--override-opt_param-scheduler"), std::string::npos) << what;
      EXPECT_NE(what.find("--use-checkpoint-opt_param-scheduler"), std::string::npos) << what;
    }
  }
}

// --override-opt_param-scheduler: the command line's settings, the checkpoint's sample count.
TEST(LrSchedule, OverrideKeepsTheCommandLinesSettings) {
  LrScheduleConfig flags{2e-3, 0, 10, 5000, LrDecayStyle::Linear};
  LrSchedule s(flags);
  s.load_state(checkpoint_schedule(), ScheduleRestore::kOverride);
  LrSchedule expected(flags);
  expected.step(640);
  EXPECT_EQ(s.num_steps(), 640);
  EXPECT_EQ(s.lr(), expected.lr());
  EXPECT_EQ(s.wd(), expected.wd());
}

// --use-checkpoint-opt_param-scheduler: every setting Megatron restores comes from the
// checkpoint; the rest (the warmup's initial LR, WSD's anneal) stays the command line's.
TEST(LrSchedule, UseCheckpointTakesTheStoredSettings) {
  LrScheduleConfig flags{2e-3, 0, 10, 5000, LrDecayStyle::Linear};
  flags.init_lr = 0;
  LrSchedule s(flags);
  s.load_state(checkpoint_schedule(), ScheduleRestore::kFromCheckpoint);
  EXPECT_EQ(s.config().max_lr, 1e-3);
  EXPECT_EQ(s.config().min_lr, 1e-4);
  EXPECT_EQ(s.config().warmup_steps, 100);
  EXPECT_EQ(s.config().decay_steps, 1000);
  EXPECT_EQ(s.config().style, LrDecayStyle::Cosine);
  EXPECT_EQ(s.config().wd_style, WeightDecayIncrStyle::Linear);
  EXPECT_EQ(s.config().start_wd, 0.01);
  EXPECT_EQ(s.config().end_wd, 0.1);
  EXPECT_EQ(s.config().wd_incr_steps, 2000);
  // The same values as the uninterrupted run, from here on: ratio (640 - 100) / 900 = 0.6.
  EXPECT_NEAR(s.lr(), 1e-4 + 0.5 * (std::cos(M_PI * 0.6) + 1.0) * 9e-4, 1e-15);
  EXPECT_NEAR(s.wd(), 0.01 + 640.0 / 2000.0 * 0.09, 1e-15);
}

// A checkpoint written before the weight-decay settings were stored: those keys are skipped.
TEST(LrSchedule, OlderCheckpointsWithoutWeightDecaySettingsLoad) {
  nlohmann::json old = checkpoint_schedule();
  for (const char* key : {"start_wd", "end_wd", "wd_incr_steps", "wd_incr_style"}) old.erase(key);
  LrSchedule s({1e-3, 1e-4, 100, 1000, LrDecayStyle::Cosine});
  s.load_state(old, ScheduleRestore::kCheck);
  EXPECT_EQ(s.num_steps(), 640);
}

TEST(LrSchedule, UnknownStoredStyleIsAnError) {
  nlohmann::json bad = checkpoint_schedule();
  bad["decay_style"] = 9;
  LrSchedule s({1e-3, 1e-4, 100, 1000, LrDecayStyle::Cosine});
  EXPECT_THROW(
      {
        try {
          s.load_state(bad, ScheduleRestore::kFromCheckpoint);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("unknown style 9"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
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
