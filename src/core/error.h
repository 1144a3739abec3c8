// megatron::Error — the one exception type of the project, and the MT_CHECK macros.
//
// An Error carries a message that names the problem and what was expected, plus the
// source location it was raised at. Bad user input and broken invariants are both reported
// through it; the CLI turns it into one line on stderr and a non-zero exit (MPI_Abort when
// several ranks run), so no rank is ever left waiting.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace megatron {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line);
  const std::string& message() const { return message_; }  // without the location
  const char* file() const { return file_; }
  int line() const { return line_; }

 private:
  std::string message_;
  const char* file_;
  int line_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace megatron

// MT_THROW("hidden size ", h, " is not divisible by ", t) — throws megatron::Error.
#define MT_THROW(...) \
  throw ::megatron::Error(::megatron::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

// MT_CHECK(cond, "message parts"...) — throws megatron::Error naming the failed condition.
#define MT_CHECK(cond, ...)                                                                  \
  do {                                                                                       \
    if (!(cond)) [[unlikely]]                                                                \
      MT_THROW(__VA_OPT__(::megatron::detail::concat(__VA_ARGS__), " ", ) "(check `", #cond, \
               "` failed)");                                                                 \
  } while (0)
