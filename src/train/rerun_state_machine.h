// Megatron-Core's rerun state machine (--rerun-mode): attributes an unexpected result of a
// training iteration (a NaN or inf loss or gradient norm, a loss spike, unexpectedly large
// gradients) to its cause by running the iteration again.
//
//   validate_results  a rejected result is re-computed at once on the same devices, from the
//                     same state (parameters, data, RNG, loss scale):
//     - a different result: a transient fault (the hardware erred once). A fatal check exits
//       with kExitFailedOnResultValidation (17) without saving: resume from the last checkpoint.
//     - the same result: the fault is in the data or the model, or a device errs persistently.
//       A fatal check saves a checkpoint of the state before the iteration (with the machine's
//       state in it) and exits with kExitResumeToDisambiguate (16): the launcher restarts the
//       job, on other nodes. The restarted job re-runs the iteration once more and compares:
//         * restarted on the same node and device: exit 16 again, nothing saved;
//         * a different result: a persistent fault of the first device ("Possible persistent
//           error"); exit 17;
//         * the same result: the result was correct — the batch is at fault; exit 17, and the
//           tracker file makes the next job skip the iteration (rerun_tracker.h).
//     A non-fatal check (spiky loss, large gradients) continues training after its verdict,
//     with the re-run's gradients.
//   report_determinism_stats  every iteration runs twice; every 2 iterations the relative
//                     differences of the validated results are reported.
//   disabled          results are checked, nothing is re-run (the divergence guard stops a
//                     non-finite run; a rejected non-fatal check is a warning).
//
// The state is identical on every rank: the validated values are identical on every rank
// (all-reduced), the injector computes every rank's draws, and every rank's node and device are
// known to all. So every rank takes every decision alike without communicating, and any rank's
// checkpoint holds the whole machine. The re-run must not change what training computes: the
// trainer's save/restore callbacks rewind the data and the loss scaler, the dropout masks are
// keyed by iteration, and the optimizer steps only after the machine has finished.
//
// Use, per iteration (the trainer's):
//   while (machine.should_run_forward_backward(batch)) { forward, backward; validate_result(...) }
//   RerunExit e = machine.should_checkpoint_and_exit(); if (e.exit) { save if e.checkpoint; exit }
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "train/rerun_error_injector.h"
#include "train/rerun_tracker.h"

namespace megatron {

// Megatron's exit codes: restart the job (on other nodes) to disambiguate the result, and the
// job failed on result validation (stop; a person looks at it).
constexpr int kExitResumeToDisambiguate = 16;
constexpr int kExitFailedOnResultValidation = 17;

enum class RerunMode { kDisabled, kValidateResults, kReportDeterminismStats };
const char* rerun_mode_name(RerunMode mode);  // "disabled", ...
// Throws Error naming --rerun-mode and the accepted values.
RerunMode rerun_mode_from_name(const std::string& name);

enum class RerunState {
  kNotRunningYet,
  kInitialRun,
  kRerunningInPlace,
  kWillRerunFromCheckpoint,
  kRerunningFromCheckpoint,
  kRerunningAgainFromCheckpoint,
};

struct RerunConfig {
  RerunMode mode = RerunMode::kDisabled;
  int64_t error_injection_rate = 0;  // 0: no injection
  RerunDiagnostic error_injection_type = RerunDiagnostic::kTransientError;
  std::string tracker_file;  // --result-rejected-tracker-filename; empty: none
  uint64_t seed = 0;         // keys the injection draws
  // The attempt of `megatron launch` this job is (0: the first run): keys the draws too.
  int64_t launch_attempt = 0;
};

// Where this process runs: the node (host name) and device of each rank (index: world rank).
// A re-run from a checkpoint is meaningful only on another node or device.
struct RerunPlacement {
  int rank = 0;
  std::vector<std::string> nodes, devices;
};

// The iteration being run: 1-based, and its global batch's consumed-sample range.
struct RerunBatch {
  int64_t iteration = 0;
  int64_t first_sample = 0, samples = 0;
};

struct RerunExit {
  bool checkpoint = false;  // save a checkpoint of the state before the iteration first
  bool exit = false;
  int code = 0;
};

// A result and the checks applied to it.
using RejectionFunc = std::function<bool(double)>;

class RerunStateMachine {
 public:
  // `save_state` / `restore_state`: record and re-establish the trainer's state at the start
  // of an iteration (data position, loss scaler), around a re-run.
  RerunStateMachine(RerunConfig config, RerunPlacement placement, std::function<void()> save_state,
                    std::function<void()> restore_state);

  RerunMode mode() const { return mode_; }
  RerunState state() const { return state_; }
  // Whether the forward/backward running now is a re-run in place (its by-products, such as
  // extra logging, are not wanted twice).
  bool rerunning_in_place() const { return state_ == RerunState::kRerunningInPlace; }

  // Whether to (re)run the iteration's forward and backward pass.
  bool should_run_forward_backward(const RerunBatch& batch);

  // Checks `result` (identical on every rank). `tolerance`: the relative difference between
  // a re-run's result and the initial one still counted as the same; `fatal`: whether a
  // verdict ends the job (else training continues).
  void validate_result(double result, const RejectionFunc& rejected, const std::string& message,
                       double tolerance, bool fatal);

  // Megatron's spike detector: false for the first `samples` finite values of `context`
  // (their maximum is recorded), then whether |value| >= threshold x that maximum.
  bool is_unexpectedly_large(double value, double threshold, const std::string& context,
                             int64_t samples = 100);

  // After the forward/backward loop, before the optimizer step.
  RerunExit should_checkpoint_and_exit();

  // The machine's part of a checkpoint (null when disabled); `layout` identifies the
  // parallel layout: a checkpoint's pending re-run is ignored at another layout, as Megatron.
  nlohmann::json state_json(const std::string& layout) const;
  // Resumes a pending re-run saved in `state` (ignored when none is pending, when this run is
  // disabled, or at another layout).
  void load_state_json(const nlohmann::json& state, const std::string& layout);

  // The iteration of a pending re-run is skipped (--iterations-to-skip, the tracker file):
  // the re-run is abandoned.
  void abandon_pending_rerun(int64_t iteration);

 private:
  struct Call {
    std::string message;
    int64_t sequence = 0;
    bool operator==(const Call&) const = default;
  };
  struct Stats {  // Megatron's QuickStats, reduced to what it prints
    int64_t total = 0, identical = 0;
    double sum = 0, max = 0;
  };

  void log_failure(int rank, const std::string& text, bool fatal) const;
  void record(int rank, RerunValidationStatus status, double result,
              const std::string& message) const;
  void report_stats();

  RerunMode mode_;
  RerunState state_ = RerunState::kNotRunningYet;
  RerunErrorInjector injector_;
  // The injector of this job's flags: a checkpoint's pending re-run brings its own, which
  // gives way to this one when the re-run is abandoned.
  RerunErrorInjector configured_injector_;
  std::string tracker_file_;
  RerunPlacement placement_;
  std::function<void()> save_state_, restore_state_;

  RerunBatch batch_;
  bool first_iteration_complete_ = false;
  bool logged_enabled_ = false;
  // Decisions of the current iteration (Megatron's per-rank flags, reduced: here all alike).
  bool rerun_requested_ = false, checkpoint_requested_ = false, restart_again_requested_ = false,
       continue_requested_ = false;
  std::map<std::string, int64_t> validation_counts_;  // calls per check in this iteration
  int64_t validations_ = 0;                           // calls in this iteration
  std::optional<Call> failed_call_;
  double initial_result_ = 0;
  // The rank the rejection is attributed to (the injecting rank; rank 0 for a result that is
  // the same on every rank), and where it ran when the first re-run reproduced the result.
  int suspicious_rank_ = 0;
  std::string suspicious_node_, suspicious_device_;
  std::map<std::string, int64_t> large_value_counts_;
  std::map<std::string, double> max_values_;
  // report_determinism_stats: the initial run's results, and the differences per check.
  std::map<std::string, std::vector<double>> saved_results_;
  std::map<std::string, Stats> stats_;
};

}  // namespace megatron
