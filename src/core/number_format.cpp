#include "core/number_format.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace megatron {

namespace {
const char* non_finite_name(double value) {
  if (std::isnan(value)) return "nan";
  return value > 0 ? "inf" : "-inf";
}
}  // namespace

std::string python_float_repr(double value) {
  if (!std::isfinite(value)) return non_finite_name(value);
  // The shortest round-trip digits, as d.ddde±X; then laid out by Python's rules. (Built by
  // appending: GCC 12 warns, -Wrestrict, on some `"." + string` temporaries.)
  char buf[64];
  const auto [end, ec] =
      std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  const std::string sci(buf, ec == std::errc() ? end : buf);
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    const int magnitude = exponent < 0 ? -exponent : exponent;
    out.append(exponent < 0 ? "e-" : "e+");
    if (magnitude < 10) out.push_back('0');
    out.append(std::to_string(magnitude));
  } else if (exponent < 0) {
    out.append("0.").append(size_t(-exponent - 1), '0').append(digits);
  } else {
    const size_t whole = size_t(exponent) + 1;
    if (digits.size() <= whole) {
      out.append(digits).append(whole - digits.size(), '0').append(".0");
    } else {
      out.append(digits, 0, whole).append(".").append(digits, whole);
    }
  }
  return out;
}

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
