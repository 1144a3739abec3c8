// CollectiveWatchdog: hang detection for a distributed run (`--distributed-timeout-minutes`,
// `--distributed-timeout-seconds-after-init`; docs/reliability.md, "Hang detection").
//
// A blocking collective whose peer never arrives waits forever: MPI has no timeout, and a rank
// stuck in a kernel, stopped (SIGSTOP, a debugger) or swapping keeps the process alive, so the
// job never ends and nothing names the culprit. The watchdog observes every communication of
// the rank (an ObservedCommunicator wraps the world and every group split from it) and runs a
// thread that, every heartbeat period,
//   1. writes this rank's heartbeat file, one line: where it is (inside which operation, as
//      which member of a group of which size, since when; or computing since its last
//      operation), how many operations it has entered, its iteration, host and PID;
//   2. when this rank has been inside one operation longer than the timeout, reads every rank's
//      heartbeat, reports where each rank is — the ranks not inside communication, and those
//      whose heartbeat stopped (stopped, hung or dead), are the ones the others wait for — and
//      ends the job (abort_job: every process, non-zero exit). The last committed checkpoint is
//      untouched (checkpoints commit atomically), so the job resumes from it.
//
// The heartbeat files live in one directory per job (make_heartbeat_dir: rank 0 creates it
// under --heartbeat-dir, default $TMPDIR or /tmp, and every rank learns its path). Ranks on
// other hosts see each other's heartbeats only when that base is a shared filesystem; without
// one, the report says which ranks it cannot see. On NCCL a collective returns once it is
// queued on the GPU: a GPU-side hang is caught where the host next waits for communication
// (a request's wait, a barrier, a host copy of a communicated tensor inside an operation).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "distributed/communicator.h"
#include "distributed/observed_communicator.h"

namespace megatron {

// One rank's heartbeat: where it is. Times are wall-clock seconds since the epoch (comparable
// across processes and, with synchronised clocks, hosts).
struct Heartbeat {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  int64_t iteration = 0;
  std::string operation;  // empty: computing (outside communication)
  int group_rank = 0, group_size = 0;
  int64_t operations = 0;  // operations entered so far
  double since = 0;        // entered `operation` (or left the last one) at this time
  double beat = 0;         // when the heartbeat was written
};

// The heartbeat file's line ("rank=0 host=... operation=all_reduce ...") and back; nullopt for a
// line that is not one (a file being replaced, another tool's file).
std::string format_heartbeat(const Heartbeat& h);
std::optional<Heartbeat> parse_heartbeat(const std::string& line);

// The timeout report of `self`, who has waited in its operation past `timeout` seconds, from
// every rank's heartbeat (`ranks[r]`, nullopt where rank r's file was not found) at time `now`;
// a heartbeat older than `stale_after` seconds is a rank that stopped beating. `flag` names how
// the timeout was set; `dir` is where the heartbeats are.
std::string hang_report(const Heartbeat& self, const std::vector<std::optional<Heartbeat>>& ranks,
                        double now, double timeout, double stale_after, const std::string& flag,
                        const std::string& dir);

// Collective over `world`: rank 0 creates a fresh directory "megatron-heartbeat-XXXXXX" under
// `base` ($TMPDIR or /tmp when empty) and every rank gets its path (and creates it if its host
// does not see rank 0's). Throws Error naming the directory when it cannot be created.
std::string make_heartbeat_dir(Communicator& world, const std::string& base);

struct WatchdogOptions {
  double timeout_seconds = 600;  // an operation waiting longer ends the job
  std::string timeout_flag = "--distributed-timeout-minutes 10";  // for the report
  std::string heartbeat_dir;                                      // make_heartbeat_dir's directory
  int rank = 0, world_size = 1;
  double heartbeat_seconds = 1;  // the period of heartbeats and checks
};

class CollectiveWatchdog final : public CommunicationObserver {
 public:
  // Starts the heartbeat thread.
  explicit CollectiveWatchdog(WatchdogOptions options);
  // Stops the thread and removes this rank's heartbeat file (and the directory, when it is the
  // last one out).
  ~CollectiveWatchdog() override;
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  void enter(const char* operation, int group_rank, int group_size) override;
  void leave() override;
  // The training iteration the rank is in, for the report.
  void set_iteration(int64_t iteration);

 private:
  Heartbeat snapshot();
  void write_heartbeat(const Heartbeat& h);
  void run();

  const WatchdogOptions options_;
  const std::string file_;  // this rank's heartbeat file
  std::mutex mutex_;        // guards the state below (enter/leave against the thread)
  Heartbeat state_;
  const char* operation_ = nullptr;
  int depth_ = 0;  // nesting of observed operations; the outermost is the one reported
  bool stop_ = false;
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace megatron
