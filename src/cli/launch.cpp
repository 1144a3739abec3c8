// `megatron launch` — automatic restart: runs a training job, and when it fails, runs it again
// from its newest checkpoint, until it finishes, a failure repeats without progress, or the
// restarts run out (docs/reliability.md, "Automatic restart").
//
//   megatron launch [--max-restarts 3] [--restart-delay 10] --
//       mpirun -np 4 megatron pretrain-gpt ... --save CKPT --load CKPT
//
// The command is run unchanged on every attempt; it resumes because it loads what it saves.
// What to do after each end is cli/launch/restart_policy.h; how the job is run and signalled,
// cli/launch/child_process.h. Exit code: the job's last one (128 + N for a signal N).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/layout.h"
#include "cli/args/arg_table.h"
#include "cli/launch/child_process.h"
#include "cli/launch/launch_attempt.h"
#include "cli/launch/restart_policy.h"
#include "cli/subcommands.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/number_format.h"
#include "distributed/runtime.h"
#include "train/exit_signal.h"

namespace megatron::cli {

namespace {

// The value of the last `--flag VALUE` or `--flag=VALUE` in the command (Megatron's last flag
// wins), empty when absent.
std::string flag_value(const std::vector<std::string>& command, const std::string& flag) {
  std::string value;
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == flag && i + 1 < command.size()) value = command[i + 1];
    if (command[i].rfind(flag + "=", 0) == 0) value = command[i].substr(flag.size() + 1);
  }
  return value;
}

bool same_directory(const std::string& a, const std::string& b) {
  return std::filesystem::weakly_canonical(a) == std::filesystem::weakly_canonical(b);
}

std::string joined(const std::vector<std::string>& words) {
  std::string text;
  for (const std::string& word : words) text.append(text.empty() ? "" : " ").append(word);
  return text;
}

int exit_code_of(const JobEnd& end) {
  return end.signal != 0 ? 128 + end.signal : end.exit_code;
}

}  // namespace

int run_launch(int argc, char** argv) {
  // The command follows "--"; everything before it is the launcher's.
  const auto separator =
      std::find_if(argv, argv + argc, [](const char* a) { return std::strcmp(a, "--") == 0; });
  const std::vector<std::string> command(std::min(separator + 1, argv + argc), argv + argc);

  CLI::App app{"Run a training job and restart it from its newest checkpoint when it fails",
               "megatron launch"};
  int max_restarts = 3;
  double restart_delay = 10;
  app.add_option("--max-restarts", max_restarts, "restarts after failures, at most")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--restart-delay", restart_delay,
                 "seconds before the first restart, doubling with each one (at most 300)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.footer(
      "usage: megatron launch [flags] -- COMMAND...   e.g. megatron launch -- mpirun -np 4 "
      "megatron pretrain-gpt ... --save CKPT --load CKPT");
  if (int rc = parse_command_line(app, int(separator - argv), argv); rc >= 0) return rc;
  MT_REQUIRE(!command.empty(),
             "megatron launch needs the command of the job after '--', e.g. megatron launch -- "
             "mpirun -np 4 megatron pretrain-gpt ... --save CKPT --load CKPT");
  MT_REQUIRE(!launched_by_mpi(),
             "megatron launch supervises a whole job and must run outside mpirun/srun: put the "
             "launcher first (megatron launch -- mpirun -np 4 megatron pretrain-gpt ...)");

  const std::string save = flag_value(command, "--save"), load = flag_value(command, "--load");
  if (save.empty())
    log_warning(
        "megatron launch: the command has no --save, so every restart begins again from "
        "iteration 0");
  else
    MT_REQUIRE(!load.empty() && same_directory(save, load), "the command saves to ", save, " but ",
               load.empty() ? "loads nothing" : "loads " + load,
               ": a restart would not resume from what it saved; add --load ", save);

  SignalForwarder signals;
  RestartPolicy policy(max_restarts);
  for (;;) {
    const int attempt = policy.restarts();
    log_info("megatron launch: attempt ", attempt, ": ", joined(command));
    const ChildEnd child = run_child(command, {{kLaunchAttemptVariable, std::to_string(attempt)}});
    JobEnd end{child.exit_code, child.signal, std::nullopt};
    if (!save.empty()) end.checkpoint = read_latest_iteration(save);
    if (signals.received() != 0) {
      log_info("megatron launch: stopped by ", signal_name(signals.received()),
               " (the job ended with ", describe(end), "); not restarting");
      return exit_code_of(end);
    }
    const LaunchDecision decision = policy.after(end);
    if (decision.action == LaunchAction::kDone) {
      log_info("megatron launch: ", decision.reason, " after ", attempt, " restart",
               attempt == 1 ? "" : "s");
      return 0;
    }
    if (decision.action == LaunchAction::kStop) {
      log_error("megatron launch: " + decision.reason);
      return exit_code_of(end);
    }
    const double delay = std::min(300.0, restart_delay * std::pow(2.0, policy.restarts() - 1));
    log_warning("megatron launch: " + decision.reason + ", in " + format_number(delay, "%.0f") +
                " s");
    if (!signals.sleep(delay)) {
      log_info("megatron launch: stopped by ", signal_name(signals.received()),
               " before restarting");
      return exit_code_of(end);
    }
  }
}

}  // namespace megatron::cli
