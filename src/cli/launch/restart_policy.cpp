#include "cli/launch/restart_policy.h"

#include "train/exit_signal.h"

namespace megatron::cli {

namespace {

bool same_failure(const JobEnd& a, const JobEnd& b) {
  return a.exit_code == b.exit_code && a.signal == b.signal && a.checkpoint == b.checkpoint;
}

std::string checkpoint_text(const std::optional<int64_t>& checkpoint) {
  return checkpoint ? "the checkpoint of iteration " + std::to_string(*checkpoint)
                    : std::string("no checkpoint");
}

}  // namespace

std::string describe(const JobEnd& end) {
  if (end.signal != 0) return "killed by " + signal_name(end.signal);
  return "exit " + std::to_string(end.exit_code);
}

LaunchDecision RestartPolicy::after(const JobEnd& end) {
  if (end.signal == 0 && end.exit_code == 0) return {LaunchAction::kDone, "the job finished"};
  const std::string what =
      "the job ended with " + describe(end) + ", newest: " + checkpoint_text(end.checkpoint);
  if (previous_failure_ && same_failure(*previous_failure_, end))
    return {LaunchAction::kStop,
            what +
                ", the same failure as the attempt before it with no newer checkpoint: a "
                "persistent error, not restarting (fix its cause, then launch again)"};
  previous_failure_ = end;
  if (restarts_ >= max_restarts_)
    return {LaunchAction::kStop,
            what + "; no restarts left (--max-restarts " + std::to_string(max_restarts_) + ")"};
  ++restarts_;
  return {LaunchAction::kRestart,
          what + "; restart " + std::to_string(restarts_) + " of " + std::to_string(max_restarts_) +
              (end.checkpoint ? " resumes from it" : " begins again: nothing was saved yet")};
}

}  // namespace megatron::cli
