#include "tasks/python_format.h"

#include <cmath>
#include <cstdio>

namespace megatron {

std::string python_format_E(double x, int precision) {
  if (std::isnan(x)) return "NAN";
  if (std::isinf(x)) return x > 0 ? "INF" : "-INF";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*E", precision, x);
  return buf;
}

}  // namespace megatron
