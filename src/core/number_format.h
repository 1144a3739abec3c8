// Numbers for people and for metrics files, with inf and NaN spelled out.
//
// printf's %E prints a NaN as "-NAN" or "NAN" depending on its sign bit, and JSON has no
// NaN at all (nlohmann::json writes null). A diverged loss must read as what it is: "nan",
// "inf" or "-inf", in the log line and — as a string — in the metrics file.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace megatron {

// "nan", "inf", "-inf", or `value` printed with `printf_format` (one double conversion,
// e.g. "%.6E").
std::string format_number(double value, const char* printf_format);

// `value` as Python's repr() writes a float: the shortest digits that read back as `value`,
// positional for exponents -4..15 ("0.0001", "4294967296.0"), else scientific with a signed
// two-digit exponent ("1e-05", "1.5e+300"). Megatron's argument dump prints floats so.
std::string python_float_repr(double value);

// `value` as a JSON number, or the string "nan", "inf" or "-inf" when it is not finite.
nlohmann::json json_number(double value);

}  // namespace megatron
