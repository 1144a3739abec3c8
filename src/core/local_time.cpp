#include "core/local_time.h"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace megatron {

std::string local_time_with_micros() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[64];
  const size_t n = std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  std::snprintf(text + n, sizeof text - n, ".%06lld", static_cast<long long>(micros));
  return text;
}

}  // namespace megatron
