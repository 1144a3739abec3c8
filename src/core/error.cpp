#include "core/error.h"

#include <cerrno>
#include <cstring>

namespace megatron {

namespace {
std::string with_check(const std::string& message, const std::string& failed_check) {
  if (failed_check.empty()) return message;
  return (message.empty() ? "" : message + " ") + "(check `" + failed_check + "` failed)";
}
}  // namespace

Error::Error(std::string message, const char* file, int line, std::string failed_check)
    : std::runtime_error(with_check(message, failed_check)),
      message_(std::move(message)),
      failed_check_(std::move(failed_check)),
      file_(file),
      line_(line) {}

std::string io_error_reason() {
  return errno != 0 ? std::strerror(errno) : "I/O error";
}

}  // namespace megatron
