// The job `megatron launch` supervises: one child process running the user's command (mpirun,
// srun, or megatron itself), with the launcher's signals passed on to it.
//
// The child gets its own process group, so that a terminal's Ctrl-C reaches the launcher
// alone and the launcher passes it on exactly once: mpirun forwards SIGINT to its ranks, and a
// rank that got SIGINT twice would stop at once instead of saving (train/exit_signal.h). Its
// stdin is /dev/null (a background process group must not read the terminal), and it gets
// SIGTERM if the launcher dies (PR_SET_PDEATHSIG), so no job outlives its supervisor.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace megatron::cli {

struct ChildEnd {
  int exit_code = 0;  // when signal == 0
  int signal = 0;     // the signal that ended the child, 0 if it exited
};

// Passes SIGTERM, SIGINT and SIGHUP received by this process to the running child (if any) and
// remembers the first one, for the lifetime of the object. One may exist at a time.
class SignalForwarder {
 public:
  SignalForwarder();
  ~SignalForwarder();
  SignalForwarder(const SignalForwarder&) = delete;
  SignalForwarder& operator=(const SignalForwarder&) = delete;

  // The first signal received (0: none).
  int received() const;
  // Sleeps `seconds`, returning early (false) when a signal arrives.
  bool sleep(double seconds) const;
};

// Runs `command` (argv[0] looked up in PATH) with `environment` added, waits for it, and says
// how it ended. Throws Error when the command cannot be started (naming it and why).
ChildEnd run_child(const std::vector<std::string>& command,
                   const std::vector<std::pair<std::string, std::string>>& environment);

}  // namespace megatron::cli
