// The local wall-clock time as Python's str(datetime.now()) prints it, for the log lines and
// records that Megatron stamps that way.
#pragma once

#include <string>

namespace megatron {

// "2024-05-01 12:34:56.123456": local time with microseconds.
std::string local_time_with_micros();

}  // namespace megatron
