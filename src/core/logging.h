// Logging: lines to stdout/stderr, by default only from the process that `set_log_rank`
// marked as rank 0 (Megatron's print_rank_0), with a severity prefix for warnings and errors.
#pragma once

#include <string>

#include "core/error.h"

namespace megatron {

void set_log_rank(int rank);  // call once after MPI starts; before that every process logs
int log_rank();

void log_line(const std::string& line);      // stdout, rank 0 only
void log_line_all(const std::string& line);  // stdout, every rank, prefixed "[rank N] "
void log_warning(const std::string& line);   // stderr, rank 0 only, "WARNING: "
void log_error(const std::string& line);     // stderr, every rank, "error: "

template <typename... Args>
void log_info(const Args&... args) {
  log_line(detail::concat(args...));
}

}  // namespace megatron
