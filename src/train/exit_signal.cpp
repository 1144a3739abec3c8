#include "train/exit_signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace megatron {

namespace {

volatile std::sig_atomic_t g_signal = 0;
int g_wake_pipe[2] = {-1, -1};  // the handler writes a byte; test_pause blocks reading it
std::atomic<bool> g_installed{false};
struct sigaction g_previous_term, g_previous_int;

void on_signal(int sig) {
  if (sig == SIGINT && g_signal == SIGINT) {  // the second Ctrl-C: stop now
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  g_signal = sig;
  const int saved_errno = errno;
  const char byte = 1;
  if (g_wake_pipe[1] >= 0) {
    [[maybe_unused]] const ssize_t n = ::write(g_wake_pipe[1], &byte, 1);
  }
  errno = saved_errno;
}

bool listed(const char* ranks, int rank) {
  if (ranks == nullptr || *ranks == '\0') return true;
  std::stringstream ss(ranks);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty() && std::atoi(item.c_str()) == rank) return true;
  return false;
}

}  // namespace

std::string signal_name(int signal) {
  if (const char* abbreviation = sigabbrev_np(signal)) return std::string("SIG") + abbreviation;
  return "signal " + std::to_string(signal);
}

ExitSignalHandler::ExitSignalHandler() {
  MT_CHECK(!g_installed.exchange(true), "only one ExitSignalHandler may exist at a time");
  g_signal = 0;
  MT_CHECK(::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) == 0,
           "cannot create a pipe: ", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, &g_previous_term);
  ::sigaction(SIGINT, &sa, &g_previous_int);
}

ExitSignalHandler::~ExitSignalHandler() {
  ::sigaction(SIGTERM, &g_previous_term, nullptr);
  ::sigaction(SIGINT, &g_previous_int, nullptr);
  for (int& fd : g_wake_pipe) {
    ::close(fd);
    fd = -1;
  }
  g_installed = false;
}

int ExitSignalHandler::received() const {
  return g_signal;
}

int ExitSignalHandler::agreed(Communicator& world, int64_t iteration) {
  test_pause(iteration, world.rank());
  return int(world.all_reduce_scalar(double(g_signal), ReduceOp::MAX));
}

void ExitSignalHandler::test_pause(int64_t iteration, int rank) {
  const char* at = std::getenv("MEGATRON_TEST_PAUSE_AT_ITERATION");
  if (at == nullptr || std::atoll(at) != iteration ||
      !listed(std::getenv("MEGATRON_TEST_PAUSE_RANKS"), rank))
    return;
  if (const char* fifo = std::getenv("MEGATRON_TEST_PAUSE_FIFO")) {
    const int fd = ::open(fifo, O_WRONLY | O_CLOEXEC);
    MT_CHECK(fd >= 0, "MEGATRON_TEST_PAUSE_FIFO '", fifo, "': ", std::strerror(errno));
    const std::string line = std::to_string(rank) + " " + std::to_string(::getpid()) + "\n";
    [[maybe_unused]] ssize_t n = ::write(fd, line.data(), line.size());
    ::close(fd);
  }
  // Block until the handler has run (in whichever thread the signal was delivered to).
  const int flags = ::fcntl(g_wake_pipe[0], F_GETFL);
  ::fcntl(g_wake_pipe[0], F_SETFL, flags & ~O_NONBLOCK);
  while (g_signal == 0) {
    char byte;
    const ssize_t n = ::read(g_wake_pipe[0], &byte, 1);
    if (n < 0 && errno != EINTR) break;
  }
  ::fcntl(g_wake_pipe[0], F_SETFL, flags);
}

}  // namespace megatron
