// megatron launch's decisions (cli/launch/restart_policy.h) on sequences of job ends.
#include <gtest/gtest.h>

#include <csignal>

#include "cli/launch/restart_policy.h"

namespace megatron::cli {
namespace {

JobEnd exited(int code, std::optional<int64_t> checkpoint) {
  return {code, 0, checkpoint};
}

TEST(RestartPolicy, FinishedJobIsDone) {
  RestartPolicy policy(3);
  EXPECT_EQ(policy.after(exited(0, 10)).action, LaunchAction::kDone);
  EXPECT_EQ(policy.restarts(), 0);
}

TEST(RestartPolicy, FailuresWithProgressRestartUntilTheyRunOut) {
  RestartPolicy policy(2);
  const LaunchDecision first = policy.after(exited(17, 4));
  EXPECT_EQ(first.action, LaunchAction::kRestart);
  EXPECT_NE(first.reason.find("exit 17"), std::string::npos) << first.reason;
  EXPECT_NE(first.reason.find("restart 1 of 2 resumes"), std::string::npos) << first.reason;
  EXPECT_EQ(policy.after(exited(17, 6)).action, LaunchAction::kRestart);  // newer checkpoint
  EXPECT_EQ(policy.restarts(), 2);
  const LaunchDecision last = policy.after(exited(17, 9));
  EXPECT_EQ(last.action, LaunchAction::kStop);
  EXPECT_NE(last.reason.find("no restarts left (--max-restarts 2)"), std::string::npos)
      << last.reason;
  EXPECT_EQ(policy.restarts(), 2);
}

TEST(RestartPolicy, SameFailureWithoutProgressStops) {
  RestartPolicy policy(10);
  EXPECT_EQ(policy.after(exited(16, 5)).action, LaunchAction::kRestart);
  const LaunchDecision again = policy.after(exited(16, 5));
  EXPECT_EQ(again.action, LaunchAction::kStop);
  EXPECT_NE(again.reason.find("persistent error"), std::string::npos) << again.reason;
  EXPECT_EQ(policy.restarts(), 1);
}

TEST(RestartPolicy, AnotherFailureAtTheSameCheckpointRestarts) {
  RestartPolicy policy(10);
  EXPECT_EQ(policy.after(exited(16, 5)).action, LaunchAction::kRestart);
  EXPECT_EQ(policy.after(exited(17, 5)).action, LaunchAction::kRestart);  // a new verdict
  EXPECT_EQ(policy.after({0, SIGKILL, 5}).action, LaunchAction::kRestart);
  EXPECT_EQ(policy.after({0, SIGKILL, 5}).action, LaunchAction::kStop);
}

TEST(RestartPolicy, NothingSavedStillComparesFailures) {
  RestartPolicy policy(3);
  const LaunchDecision first = policy.after(exited(1, std::nullopt));
  EXPECT_EQ(first.action, LaunchAction::kRestart);
  EXPECT_NE(first.reason.find("begins again: nothing was saved yet"), std::string::npos)
      << first.reason;
  EXPECT_EQ(policy.after(exited(1, std::nullopt)).action, LaunchAction::kStop);
}

TEST(RestartPolicy, NoRestartsAllowed) {
  RestartPolicy policy(0);
  EXPECT_EQ(policy.after(exited(17, 3)).action, LaunchAction::kStop);
}

TEST(RestartPolicy, DescribesSignals) {
  EXPECT_EQ(describe({0, SIGKILL, std::nullopt}), "killed by SIGKILL");
  EXPECT_EQ(describe(exited(16, 1)), "exit 16");
}

}  // namespace
}  // namespace megatron::cli
