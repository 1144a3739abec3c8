#include "core/decimal.h"

#include <charconv>
#include <cstdlib>
#include <string>

namespace megatron {

double as_written(float value) {
  char buf[64];
  // std::to_chars without a precision writes the shortest representation that round-trips.
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf) - 1, value);
  if (ec != std::errc()) return double(value);
  *end = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace megatron
