// megatron::Error — the one exception type of the project, and the MT_CHECK / MT_REQUIRE
// macros.
//
// An Error carries a message that names the problem and what was expected, plus the
// source location it was raised at. Two kinds of failure go through it:
//   - bad input (a flag, a file, a checkpoint): MT_REQUIRE(cond, "sentence") or MT_THROW —
//     the message is a sentence for people and is printed as it is;
//   - a broken internal invariant (a bug): MT_CHECK(cond, "sentence") — the message is
//     followed by "(check `cond` failed)" so that a developer can find the check.
// The CLI turns either into one line on stderr (report()) and a non-zero exit. When every
// rank of a job raises an error together (run_on_all_ranks, the divergence guard) it is
// marked collective: the job ends without MPI_Abort and only the reporting rank prints it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace megatron {

class Error : public std::runtime_error {
 public:
  // `failed_check`: the condition text of a failed MT_CHECK ("" for input errors).
  Error(std::string message, const char* file, int line, std::string failed_check = {});
  // The sentence for people, never with the check text.
  const std::string& message() const { return message_; }
  // The failed MT_CHECK condition; empty for input errors (MT_REQUIRE, MT_THROW).
  const std::string& failed_check() const { return failed_check_; }
  bool internal() const { return !failed_check_.empty(); }
  // What the CLI prints after "error: ": the message, plus "(check `…` failed)" for internal
  // invariant failures. Equals what().
  std::string report() const { return what(); }
  const char* file() const { return file_; }
  int line() const { return line_; }

  // Collective errors: every rank of the job raised this error at the same point, so the
  // job can end cleanly (no MPI_Abort); only the rank with `reporting()` prints it.
  bool collective() const { return collective_; }
  bool reporting() const { return reporting_; }
  Error& mark_collective(bool reporting) {
    collective_ = true;
    reporting_ = reporting;
    return *this;
  }

 private:
  std::string message_, failed_check_;
  const char* file_;
  int line_;
  bool collective_ = false, reporting_ = true;
};

// Why the last failed I/O call failed, for a message: strerror(errno) ("No space left on
// device"), or "I/O error" when errno says nothing (streams do not always set it). Clear errno
// before the call.
std::string io_error_reason();

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

// MT_REQUIRE(cond, "message parts"...) — validates input: throws megatron::Error with the
// message alone (a sentence naming the input and what was expected).
#define MT_REQUIRE(cond, ...) \
  do {                        \
    if (!(cond)) [[unlikely]] \
      MT_THROW(__VA_ARGS__);  \
  } while (0)

// MT_CHECK(cond, "message parts"...) — an internal invariant: throws megatron::Error whose
// report names the failed condition.
#define MT_CHECK(cond, ...)                                                                       \
  do {                                                                                            \
    if (!(cond)) [[unlikely]]                                                                     \
      throw ::megatron::Error(::megatron::detail::concat(__VA_OPT__(__VA_ARGS__, ) ""), __FILE__, \
                              __LINE__, #cond);                                                   \
  } while (0)
