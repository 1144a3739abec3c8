// What `megatron launch` does when the job it supervises ends: finish, restart it from its
// newest checkpoint, or stop. The decision is a pure function of the job's ends so far (tested
// in unit/cli_restart_policy_test.cpp); cli/launch.cpp runs the processes.
//
//   job end                                          decision
//   exit 0                                           done
//   any failure, restarts left, progress since the   restart (Megatron's exit 16 "resume to
//     previous failure                               disambiguate" and 17 "failed on result
//                                                    validation" included: docs/reliability.md)
//   the same failure (exit code or signal) with the  stop: a persistent error — restarting
//     same newest checkpoint as the previous one     would only repeat it
//   no restarts left                                 stop
//
// "Progress" is the newest committed checkpoint of the job's --save: a job that fails again
// after saving a newer checkpoint, or fails another way, is worth another try.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace megatron::cli {

struct JobEnd {
  int exit_code = 0;  // when signal == 0
  int signal = 0;     // the signal that ended the job's process, 0 if it exited
  // The newest committed checkpoint in the job's --save after it ended (none: no --save, or
  // nothing committed yet).
  std::optional<int64_t> checkpoint;
};

// "exit 17", "killed by SIGKILL".
std::string describe(const JobEnd& end);

enum class LaunchAction { kDone, kRestart, kStop };

struct LaunchDecision {
  LaunchAction action = LaunchAction::kDone;
  std::string reason;  // one sentence for the log
};

class RestartPolicy {
 public:
  explicit RestartPolicy(int max_restarts) : max_restarts_(max_restarts) {}

  // Records the end of the current attempt and says what comes next.
  LaunchDecision after(const JobEnd& end);
  // Restarts decided so far: the next attempt's number (0 is the first run).
  int restarts() const { return restarts_; }

 private:
  int max_restarts_;
  int restarts_ = 0;
  std::optional<JobEnd> previous_failure_;
};

}  // namespace megatron::cli
