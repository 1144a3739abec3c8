#include "core/logging.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>

namespace megatron {

namespace {
int g_rank = 0;
std::mutex g_mutex;  // keeps lines from the data-loader thread and the main thread whole

// The line and its newline go out in one write(2), so that lines of processes sharing the
// stream (mpirun merges every rank's stderr) never run together.
void write(FILE* f, const std::string& s) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const std::string line = s + "\n";
  std::fflush(f);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(::fileno(f), p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere left to report to
    p += n;
    left -= size_t(n);
  }
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
