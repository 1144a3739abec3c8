// The straggler report's line from given per-rank times (train/log/straggler_report.h); the
// measured times under mpirun, with a rank made slow by SIGSTOP, are tests/e2e/hang_detection.sh's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "train/log/straggler_report.h"

namespace megatron {
namespace {

TEST(StragglerReport, NamesTheSlowestRanksAndTheStragglers) {
  const std::vector<double> compute = {100.0, 180.0, 101.0, 99.0};
  const std::vector<double> communication = {90.0, 10.0, 89.0, 91.0};
  EXPECT_EQ(straggler_report(20, 10, compute, communication, 1),
            "straggler report, iterations 11-20, ms per iteration: compute min 99.0 (rank 3) | "
            "median 100.5 | max 180.0 (rank 1); communication min 10.0 (rank 1) | median 89.5 | "
            "max 91.0 (rank 3); stragglers (compute > 1.1x the median): rank 1 (1.8x)");
  EXPECT_EQ(straggler_report(5, 5, compute, communication, 2),
            "straggler report, iterations 1-5, ms per iteration: compute min 99.0 (rank 3), 100.0 "
            "(rank 0) | median 100.5 | max 180.0 (rank 1), 101.0 (rank 2); communication min 10.0 "
            "(rank 1), 89.0 (rank 2) | median 89.5 | max 91.0 (rank 3), 90.0 (rank 0); stragglers "
            "(compute > 1.1x the median): rank 1 (1.8x)");
}

TEST(StragglerReport, EvenRanksHaveNoStragglers) {
  const std::vector<double> compute = {50.0, 52.0, 51.0}, communication = {5.0, 4.0, 6.0};
  EXPECT_THAT(straggler_report(3, 1, compute, communication, 5),
              ::testing::EndsWith("stragglers (compute > 1.1x the median): none"));
  EXPECT_THAT(
      straggler_report(3, 1, compute, communication, 5),
      ::testing::HasSubstr("compute min 50.0 (rank 0), 51.0 (rank 2), 52.0 (rank 1) | "
                           "median 51.0 | max 52.0 (rank 1), 51.0 (rank 2), 50.0 (rank 0)"));
}

TEST(StragglerReport, SeveralStragglersAreListed) {
  const std::vector<double> compute = {10.0, 30.0, 10.0, 40.0}, communication = {1, 1, 1, 1};
  EXPECT_THAT(straggler_report(1, 1, compute, communication, 1),
              ::testing::EndsWith("stragglers (compute > 1.1x the median): ranks 1 (1.5x), 3 "
                                  "(2.0x)"));
}

}  // namespace
}  // namespace megatron
