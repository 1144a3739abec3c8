// Python's spellings of floats, for result lines that must read exactly as Megatron's:
// '{}'.format(x) is repr(x), python_float_repr (core/number_format.h), and '{:.4E}'.format(x).
#pragma once

#include <string>

#include "core/number_format.h"

namespace megatron {

// '{:.{precision}E}'.format(x): as printf's %.*E ("3.1416E+00"), with Python's "NAN", "INF",
// "-INF".
std::string python_format_E(double x, int precision);

}  // namespace megatron
