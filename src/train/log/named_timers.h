// NamedTimers: Megatron's per-operation timers (megatron/core/timers.py) for
// --timing-log-level 1|2 and --timing-log-option minmax|max|all.
//
// Each timer has Megatron's name and log level and runs only when its level is at most
// --timing-log-level (level 0: none runs, nothing is printed). A running timer synchronises the
// device at start and stop, as Megatron's do, so it measures the operation rather than its
// launch. At each log line the times, per iteration over the interval, are printed after the
// iteration line as Megatron prints them, e.g. (minmax):
//   (min, max) time across ranks (ms):
//       forward-backward ...............................: (12.34, 12.56)
// Timers no rank ran are left out. The names reported are Megatron's `timers_to_log`, in its
// order; those measured here are listed in docs/training.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/timer.h"
#include "distributed/communicator.h"

namespace megatron {

enum class TimingLogOption { kMinMax, kMax, kAll };
// "minmax" | "max" | "all"; an Error naming --timing-log-option otherwise.
TimingLogOption timing_log_option_from_name(const std::string& name);

class NamedTimers {
 public:
  // `log_level`: --timing-log-level (0, 1 or 2; an Error naming the flag otherwise).
  NamedTimers(int log_level, TimingLogOption option, Device device);

  bool enabled(int level) const { return level <= log_level_ && log_level_ > 0; }

  // Times its lifetime as `name` when `level` is enabled (Megatron's start/stop pair).
  class Scope {
   public:
    Scope(NamedTimers& timers, const char* name, int level);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    NamedTimers& timers_;
    Timer* timer_ = nullptr;
  };

  // Runs fn(), timed as `name` when `level` is enabled.
  template <typename Fn>
  decltype(auto) time(const char* name, int level, Fn&& fn) {
    Scope scope(*this, name, level);
    return fn();
  }

  // The per-iteration (÷ `iterations`) times of every timer, in ms, from every rank of `world`
  // (a collective: every rank calls it at the same point). Returns Megatron's block ("" when no
  // timer ran) and, per timer that ran, the maximum over ranks (TensorBoard's "<name>-time").
  // `reset`: start a new interval.
  struct Report {
    std::string text;
    std::vector<std::pair<std::string, double>> max_ms;
  };
  Report report(Communicator& world, int64_t iterations, bool reset);

 private:
  int log_level_;
  TimingLogOption option_;
  Device device_;
  std::map<std::string, Timer> timers_;
};

}  // namespace megatron
