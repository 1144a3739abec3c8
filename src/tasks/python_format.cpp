#include "tasks/python_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <system_error>

#include "core/error.h"

namespace megatron {

std::string python_float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  // The shortest round-trip digits, as "d[.ddd]e±XX".
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof buf, std::fabs(x), std::chars_format::scientific);
  MT_CHECK(r.ec == std::errc(), "cannot format ", x);
  const std::string sci(buf, r.ptr);
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);

  std::string out = std::signbit(x) ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out.append(exp);
  }
  if (exponent < 0) return out.append("0.").append(size_t(-exponent - 1), '0').append(digits);
  const size_t int_digits = size_t(exponent) + 1;
  if (digits.size() <= int_digits)
    return out.append(digits).append(int_digits - digits.size(), '0').append(".0");
  return out.append(digits, 0, int_digits).append(".").append(digits, int_digits);
}

std::string python_format_E(double x, int precision) {
  if (std::isnan(x)) return "NAN";
  if (std::isinf(x)) return x > 0 ? "INF" : "-INF";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*E", precision, x);
  return buf;
}

}  // namespace megatron
