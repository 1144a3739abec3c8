// NamedTimers (--timing-log-level / --timing-log-option): level gating, Megatron's block in its
// three layouts, per-iteration normalisation and reset.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "distributed/solo_communicator.h"
#include "train/log/named_timers.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

void sleep_ms(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

TEST(NamedTimers, LevelsGateTimersAndMegatronsMinMaxBlockIsPrinted) {
  SoloCommunicator world;
  NamedTimers timers(1, TimingLogOption::kMinMax, Device::CPU);
  EXPECT_TRUE(timers.enabled(1));
  EXPECT_FALSE(timers.enabled(2));
  for (int i = 0; i < 2; ++i) {
    timers.time("forward-backward", 1, [] { sleep_ms(20); });
    timers.time("forward-compute", 2, [] { sleep_ms(20); });  // level 2: not timed at level 1
  }
  const NamedTimers::Report r = timers.report(world, 2, /*reset=*/true);
  ASSERT_EQ(r.max_ms.size(), 1u);
  EXPECT_EQ(r.max_ms[0].first, "forward-backward");
  EXPECT_GE(r.max_ms[0].second, 19.0);  // per iteration: 2 × 20 ms / 2
  EXPECT_LT(r.max_ms[0].second, 200.0);
  EXPECT_THAT(r.text, HasSubstr("(min, max) time across ranks (ms):\n    forward-backward "
                                "...............................: ("));
  EXPECT_EQ(r.text.find("forward-compute"), std::string::npos);
  // Reset: the next interval starts empty.
  EXPECT_EQ(timers.report(world, 1, true).text, "");
}

TEST(NamedTimers, MaxAndAllLayouts) {
  SoloCommunicator world;
  NamedTimers max_only(2, TimingLogOption::kMax, Device::CPU);
  max_only.time("optimizer", 1, [] { sleep_ms(5); });
  EXPECT_THAT(max_only.report(world, 1, false).text,
              HasSubstr("max time across ranks (ms):\n    optimizer "));
  NamedTimers all(2, TimingLogOption::kAll, Device::CPU);
  all.time("backward-compute", 2, [] { sleep_ms(5); });
  EXPECT_THAT(all.report(world, 1, false).text,
              HasSubstr("times across ranks (ms):\n  backward-compute:\n     rank  0: "));
}

TEST(NamedTimers, LevelZeroTimesNothingAndBadValuesAreNamed) {
  SoloCommunicator world;
  NamedTimers off(0, TimingLogOption::kMinMax, Device::CPU);
  off.time("forward-backward", 1, [] { sleep_ms(1); });
  EXPECT_EQ(off.report(world, 1, true).text, "");
  EXPECT_THROW(NamedTimers(3, TimingLogOption::kMinMax, Device::CPU), Error);
  try {
    timing_log_option_from_name("median");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--timing-log-option must be minmax, max or all"));
  }
}

}  // namespace
}  // namespace megatron
