#include "cli/launch/child_process.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>

#include "core/error.h"

namespace megatron::cli {

namespace {

volatile sig_atomic_t g_child = 0;     // the running child's pid, 0 when none
volatile sig_atomic_t g_received = 0;  // the first signal received
bool g_forwarder_exists = false;

constexpr int kForwardedSignals[] = {SIGTERM, SIGINT, SIGHUP};

extern "C" void forward_signal(int signal) {
  if (g_received == 0) g_received = signal;
  if (g_child > 0) kill(pid_t(g_child), signal);
}

// In the child, between fork and exec: only async-signal-safe calls. On failure, errno goes
// to the parent through `report` (close-on-exec, so a successful exec closes it empty).
[[noreturn]] void exec_child(char* const* argv, int report, pid_t parent) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
  for (int s : kForwardedSignals) signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
  execvp(argv[0], argv);
  const int error = errno;
  (void)!write(report, &error, sizeof error);
  _exit(127);
}

}  // namespace

SignalForwarder::SignalForwarder() {
  MT_CHECK(!g_forwarder_exists, "one SignalForwarder at a time");
  g_forwarder_exists = true;
  g_received = 0;
  struct sigaction action {};
  action.sa_handler = forward_signal;
  sigemptyset(&action.sa_mask);
  for (int s : kForwardedSignals) sigaction(s, &action, nullptr);
}

SignalForwarder::~SignalForwarder() {
  for (int s : kForwardedSignals) signal(s, SIG_DFL);
  g_forwarder_exists = false;
}

int SignalForwarder::received() const {
  return g_received;
}

bool SignalForwarder::sleep(double seconds) const {
  timespec left{time_t(seconds), long((seconds - double(time_t(seconds))) * 1e9)};
  while (g_received == 0 && nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
  return g_received == 0;
}

ChildEnd run_child(const std::vector<std::string>& command,
                   const std::vector<std::pair<std::string, std::string>>& environment) {
  MT_REQUIRE(!command.empty(), "no command to run");
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const auto& [name, value] : environment) setenv(name.c_str(), value.c_str(), 1);

  int report[2];
  MT_REQUIRE(pipe2(report, O_CLOEXEC) == 0, "cannot create a pipe: ", std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) exec_child(argv.data(), report[1], parent);
  const int fork_error = errno;
  close(report[1]);
  if (pid < 0) {
    close(report[0]);
    MT_THROW("cannot start '", command.front(), "': fork failed: ", std::strerror(fork_error));
  }
  setpgid(pid, pid);  // also here, so the group exists before any signal is forwarded
  g_child = pid;
  if (g_received != 0) kill(pid, g_received);  // it arrived before g_child was set
  int exec_error = 0;
  ssize_t got;
  while ((got = read(report[0], &exec_error, sizeof exec_error)) < 0 && errno == EINTR) {
  }
  close(report[0]);

  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno == EINTR) continue;
    g_child = 0;
    MT_THROW("waiting for '", command.front(), "' failed: ", std::strerror(errno));
  }
  g_child = 0;
  MT_REQUIRE(got != sizeof exec_error, "cannot run '", command.front(),
             "': ", std::strerror(exec_error), " (is it installed and on PATH?)");
  if (WIFSIGNALED(status)) return {0, WTERMSIG(status)};
  return {WEXITSTATUS(status), 0};
}

}  // namespace megatron::cli
