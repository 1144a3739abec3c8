// --exit-signal-handler (Megatron's flag): SIGTERM or SIGINT asks a training run to stop
// cleanly — finish the current iteration, save a checkpoint, exit 0 — instead of dying with
// everything since the last save lost (a preempted or cancelled cluster job).
//
// The handler only records the signal (async-signal-safe). At the end of each iteration the
// trainer calls agreed(): one all-reduce (MAX) over the world, so that every rank stops after
// the same iteration even when the signal reached the ranks at different times, or reached
// only some of them. A second SIGINT (Ctrl-C twice) ends the process at once.
//
// Test hook (tests/e2e/exit_signal.sh): with MEGATRON_TEST_PAUSE_AT_ITERATION=N set, the
// ranks listed in MEGATRON_TEST_PAUSE_RANKS (comma-separated; default: every rank) block at
// the end of iteration N until a signal arrives, after writing "RANK PID\n" to the file (a
// FIFO) named by MEGATRON_TEST_PAUSE_FIFO. A test thus sends its signals at a known
// iteration without sleeping or racing the run.
#pragma once

#include <cstdint>
#include <string>

#include "distributed/communicator.h"

namespace megatron {

class ExitSignalHandler {
 public:
  // Installs the handlers for SIGTERM and SIGINT. One handler may exist at a time.
  ExitSignalHandler();
  // Restores the previous dispositions.
  ~ExitSignalHandler();
  ExitSignalHandler(const ExitSignalHandler&) = delete;
  ExitSignalHandler& operator=(const ExitSignalHandler&) = delete;

  // The signal this process received (0: none).
  int received() const;
  // Collective over `world`: the signal any rank received (0: none), the same on all ranks.
  // Runs the test hook first.
  int agreed(Communicator& world, int64_t iteration);

 private:
  void test_pause(int64_t iteration, int rank);
};

// "SIGTERM", "SIGKILL", ..., or "signal N" for a number without a name.
std::string signal_name(int signal);

}  // namespace megatron
