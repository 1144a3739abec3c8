#include "core/number_format.h"

#include <cmath>
#include <cstdio>

namespace megatron {

namespace {
const char* non_finite_name(double value) {
  if (std::isnan(value)) return "nan";
  return value > 0 ? "inf" : "-inf";
}
}  // namespace

std::string format_number(double value, const char* printf_format) {
  if (!std::isfinite(value)) return non_finite_name(value);
  char buf[64];
  std::snprintf(buf, sizeof buf, printf_format, value);
  return buf;
}

nlohmann::json json_number(double value) {
  if (!std::isfinite(value)) return non_finite_name(value);
  return value;
}

}  // namespace megatron
