// Timer: wall-clock stopwatch that accumulates over start/stop pairs (Megatron's timers).
#pragma once

#include <chrono>

namespace megatron {

class Timer {
 public:
  using Clock = std::chrono::steady_clock;
  void start() {
    started_ = Clock::now();
    running_ = true;
  }
  void stop() {
    if (running_) total_ += Clock::now() - started_;
    running_ = false;
  }
  void reset() {
    total_ = Clock::duration::zero();
    running_ = false;
  }
  double seconds() const {
    auto t = total_;
    if (running_) t += Clock::now() - started_;
    return std::chrono::duration<double>(t).count();
  }

 private:
  Clock::time_point started_{};
  Clock::duration total_{};
  bool running_ = false;
};

// Starts a timer on construction and stops it on destruction.
class ScopedTimer {
 public:
  explicit ScopedTimer(Timer& t) : t_(t) { t_.start(); }
  ~ScopedTimer() { t_.stop(); }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  Timer& t_;
};

}  // namespace megatron
