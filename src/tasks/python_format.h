// Python's spellings of floats, for result lines that must read exactly as Megatron's:
// '{}'.format(x) (repr: the shortest decimal that round-trips) and '{:.4E}'.format(x).
#pragma once

#include <string>

namespace megatron {

// repr(x): shortest round-trip digits; positional ("1.25", "100.0", "0.0001") when the decimal
// exponent is in [-4, 16), else scientific ("1e-05", "1.5e+16"); "nan", "inf", "-inf".
std::string python_float_repr(double x);

// '{:.{precision}E}'.format(x): as printf's %.*E ("3.1416E+00"), with Python's "NAN", "INF",
// "-INF".
std::string python_format_E(double x, int precision);

}  // namespace megatron
