#include "cli/bench/seconds_per_call.h"

#include <chrono>

#include "core/device_runtime.h"

namespace megatron::cli {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double seconds_per_call(const std::function<void()>& fn, double min_time, Device device) {
  using Clock = std::chrono::steady_clock;
  fn();  // warm-up
  synchronize(device);
  int calls = 0;
  const Clock::time_point start = Clock::now();
  double elapsed = 0;
  do {
    fn();
    ++calls;
    synchronize(device);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  } while (calls < 2 || elapsed < min_time);
  return elapsed / calls;
}

}  // namespace megatron::cli
