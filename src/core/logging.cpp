#include "core/logging.h"

#include <cstdio>
#include <mutex>

namespace megatron {

namespace {
int g_rank = 0;
std::mutex g_mutex;  // keeps lines from the data-loader thread and the main thread whole

void write(FILE* f, const std::string& s) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::fputs(s.c_str(), f);
  std::fputc('\n', f);
  std::fflush(f);
}
}  // namespace

void set_log_rank(int rank) {
  g_rank = rank;
}
int log_rank() {
  return g_rank;
}

void log_line(const std::string& line) {
  if (g_rank == 0) write(stdout, line);
}

void log_line_all(const std::string& line) {
  write(stdout, "[rank " + std::to_string(g_rank) + "] " + line);
}

void log_warning(const std::string& line) {
  if (g_rank == 0) write(stderr, "WARNING: " + line);
}

void log_error(const std::string& line) {
  write(stderr, "error: " + line);
}

}  // namespace megatron
