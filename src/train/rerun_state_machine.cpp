#include "train/rerun_state_machine.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/logging.h"
#include "core/number_format.h"

namespace megatron {

namespace {

constexpr RerunState kStates[] = {
    RerunState::kNotRunningYet,           RerunState::kInitialRun,
    RerunState::kRerunningInPlace,        RerunState::kWillRerunFromCheckpoint,
    RerunState::kRerunningFromCheckpoint, RerunState::kRerunningAgainFromCheckpoint};

const char* state_name(RerunState s) {
  switch (s) {
    case RerunState::kNotRunningYet:
      return "not_running_yet";
    case RerunState::kInitialRun:
      return "initial_run";
    case RerunState::kRerunningInPlace:
      return "rerunning_in_place";
    case RerunState::kWillRerunFromCheckpoint:
      return "will_rerun_from_checkpoint";
    case RerunState::kRerunningFromCheckpoint:
      return "rerunning_from_checkpoint";
    case RerunState::kRerunningAgainFromCheckpoint:
      return "rerunning_again_from_checkpoint";
  }
  MT_CHECK(false, "unknown rerun state");
}

RerunState state_from_name(const std::string& name) {
  for (RerunState s : kStates)
    if (name == state_name(s)) return s;
  MT_THROW("the checkpoint's rerun state machine is in an unknown state '", name, "'");
}

// Megatron's _compare_floats: 0 when equal (or both NaN), infinity when one is NaN or inf and
// the other not, else the relative difference |a - b| / mean(a, b).
double compare(double a, double b) {
  if (a == b || (std::isnan(a) && std::isnan(b))) return 0.0;
  if (!std::isfinite(a) || !std::isfinite(b)) return std::numeric_limits<double>::infinity();
  return std::fabs((a - b) / (a + b) * 2.0);
}

std::string number(double v) {
  return format_number(v, "%.9g");
}

// Every 2 iterations, as Megatron's REPORTING_INTERVAL_ITERATIONS.
constexpr int64_t kReportingInterval = 2;

}  // namespace

const char* rerun_mode_name(RerunMode mode) {
  switch (mode) {
    case RerunMode::kDisabled:
      return "disabled";
    case RerunMode::kValidateResults:
      return "validate_results";
    case RerunMode::kReportDeterminismStats:
      return "report_determinism_stats";
  }
  MT_CHECK(false, "unknown rerun mode");
}

RerunMode rerun_mode_from_name(const std::string& name) {
  for (RerunMode m :
       {RerunMode::kDisabled, RerunMode::kValidateResults, RerunMode::kReportDeterminismStats})
    if (name == rerun_mode_name(m)) return m;
  MT_THROW("--rerun-mode must be disabled, validate_results or report_determinism_stats, got '",
           name, "'");
}

RerunStateMachine::RerunStateMachine(RerunConfig config, RerunPlacement placement,
                                     std::function<void()> save_state,
                                     std::function<void()> restore_state)
    : mode_(config.mode),
      injector_(config.error_injection_rate, config.error_injection_type, config.seed,
                config.launch_attempt),
      configured_injector_(injector_),
      tracker_file_(std::move(config.tracker_file)),
      placement_(std::move(placement)),
      save_state_(std::move(save_state)),
      restore_state_(std::move(restore_state)) {
  MT_CHECK(placement_.nodes.size() == placement_.devices.size() && !placement_.nodes.empty(),
           "a node and a device per rank");
  if (mode_ != RerunMode::kDisabled)
    log_warning(std::string("RerunStateMachine initialized in mode ") + rerun_mode_name(mode_));
}

bool RerunStateMachine::should_run_forward_backward(const RerunBatch& batch) {
  validation_counts_.clear();
  validations_ = 0;
  switch (state_) {
    case RerunState::kNotRunningYet:
      batch_ = batch;
      state_ = RerunState::kInitialRun;
      if (mode_ == RerunMode::kDisabled) return true;
      save_state_();
      rerun_requested_ = checkpoint_requested_ = restart_again_requested_ = continue_requested_ =
          false;
      return true;
    case RerunState::kInitialRun:
      if (mode_ == RerunMode::kDisabled || !rerun_requested_) {
        state_ = RerunState::kNotRunningYet;
        return false;
      }
      if (mode_ == RerunMode::kValidateResults)
        log_warning("Need to rerun step to check reproducibility of initial result");
      state_ = RerunState::kRerunningInPlace;
      restore_state_();
      return true;
    case RerunState::kRerunningInPlace:
      if (mode_ == RerunMode::kReportDeterminismStats) {
        state_ = RerunState::kNotRunningYet;
        if ((batch_.iteration - 1) % kReportingInterval == 0) report_stats();
        saved_results_.clear();
        return false;
      }
      if (continue_requested_) {
        log_warning("Continuing normal execution because failed validation was not fatal");
        state_ = RerunState::kNotRunningYet;
        return false;
      }
      if (checkpoint_requested_) state_ = RerunState::kWillRerunFromCheckpoint;
      restore_state_();
      return false;
    case RerunState::kWillRerunFromCheckpoint:
      MT_CHECK(batch.iteration == batch_.iteration, "the re-run from the checkpoint of iteration ",
               batch_.iteration, " runs iteration ", batch.iteration);
      state_ = RerunState::kRerunningFromCheckpoint;
      return true;
    case RerunState::kRerunningFromCheckpoint:
      if (restart_again_requested_) {
        log_warning(
            "Need to restart job from the same checkpoint because it was scheduled on the same "
            "node/GPU");
        state_ = RerunState::kRerunningAgainFromCheckpoint;
      } else if (continue_requested_) {
        log_warning("Continuing normal execution because failed validation was not fatal");
        state_ = RerunState::kNotRunningYet;
      }
      return false;
    case RerunState::kRerunningAgainFromCheckpoint:
      break;
  }
  MT_CHECK(false, "the rerun state machine cannot run an iteration in state ", state_name(state_));
}

RerunExit RerunStateMachine::should_checkpoint_and_exit() {
  first_iteration_complete_ = true;
  if (mode_ != RerunMode::kValidateResults) return {};
  switch (state_) {
    case RerunState::kRerunningInPlace:
      log_warning("Exiting now. The job can be resumed from a previous checkpoint");
      return {false, true, kExitFailedOnResultValidation};
    case RerunState::kWillRerunFromCheckpoint:
      log_warning(
          "Saving a checkpoint and exiting now. Please resume the job from the checkpoint to "
          "rerun the last iteration and establish a diagnostic");
      return {true, true, kExitResumeToDisambiguate};
    case RerunState::kRerunningFromCheckpoint:
      log_warning(
          "Exiting now. A checkpoint at the last iteration already exists if further "
          "examination is needed");
      return {false, true, kExitFailedOnResultValidation};
    case RerunState::kRerunningAgainFromCheckpoint:
      log_warning(
          "Exiting now. Please resume the job from the same checkpoint to rerun the last "
          "iteration and establish a diagnostic");
      return {false, true, kExitResumeToDisambiguate};
    default:
      return {};
  }
}

void RerunStateMachine::log_failure(int rank, const std::string& text, bool fatal) const {
  const std::string line = "Rank " + std::to_string(rank) + ", node " + placement_.nodes[rank] +
                           ", device " + placement_.devices[rank] + ", iteration #" +
                           std::to_string(batch_.iteration) + ": " + text + "!";
  if (!fatal) {
    log_warning(line);
  } else if (placement_.rank == 0) {
    log_error(line);
  }
}

void RerunStateMachine::record(int rank, RerunValidationStatus status, double result,
                               const std::string& message) const {
  if (tracker_file_.empty() || placement_.rank != 0) return;
  append_tracker_record(tracker_file_,
                        {placement_.nodes[rank], placement_.devices[rank], rank, batch_.iteration,
                         status, result, message, batch_.first_sample, batch_.samples});
}

void RerunStateMachine::validate_result(double result, const RejectionFunc& rejected,
                                        const std::string& message, double tolerance, bool fatal) {
  // Disabled: checked, nothing re-run. A fatal rejection is the divergence guard's to stop.
  if (mode_ == RerunMode::kDisabled) {
    if (!rejected(result)) return;
    record(0, RerunValidationStatus::kRerunDisabled, result, message);
    if (!fatal)
      log_warning("Rank 0, iteration " + std::to_string(batch_.iteration) + ": Unexpected result " +
                  number(result) + " (message='" + message + "')");
    return;
  }
  MT_CHECK(state_ != RerunState::kNotRunningYet,
           "validate_result is called inside the forward/backward loop only");
  const Call call{message, ++validation_counts_[message]};
  const int64_t validation = validations_++;
  const std::string key = message + "#" + std::to_string(call.sequence);

  if (mode_ == RerunMode::kReportDeterminismStats) {
    if (state_ == RerunState::kInitialRun) {
      rerun_requested_ = true;
      saved_results_[key].push_back(result);
    } else if (state_ == RerunState::kRerunningInPlace) {
      const auto initial = saved_results_.find(key);
      MT_CHECK(initial != saved_results_.end(), "no initial result of '", key, "'");
      const double diff = compare(initial->second.front(), result);
      Stats& s = stats_[message];
      ++s.total;
      if (diff == 0.0) {
        ++s.identical;
      } else {
        s.sum += diff;
        s.max = std::max(s.max, diff);
      }
    }
    return;
  }

  if (!logged_enabled_) {
    logged_enabled_ = true;
    log_warning("Result validation enabled");
  }

  if (state_ == RerunState::kInitialRun && !rerun_requested_) {
    // Not on a job's first iteration: a checkpoint needs an optimizer step first.
    if (!first_iteration_complete_) return;
    const int world = int(placement_.nodes.size());
    const std::optional<int> injecting =
        injector_.maybe_inject(batch_.iteration, validation, world);
    if (!injecting && !rejected(result)) return;
    suspicious_rank_ = injecting.value_or(0);
    failed_call_ = call;
    initial_result_ = result;
    rerun_requested_ = true;
    record(suspicious_rank_, RerunValidationStatus::kInitialRun, result, message);
    log_warning("Unexpected result " + number(result) + " on rank " +
                std::to_string(suspicious_rank_) + " at iteration #" +
                std::to_string(batch_.iteration) + " invocation #" + std::to_string(call.sequence) +
                " (message='" + message + "')");
    return;
  }
  const bool rerunning =
      state_ == RerunState::kRerunningInPlace || state_ == RerunState::kRerunningFromCheckpoint;
  if (!rerunning || !failed_call_ || !(call == *failed_call_)) return;
  const int rank = suspicious_rank_;
  if (state_ == RerunState::kRerunningInPlace) {
    const double comparison =
        injector_.maybe_miscompare(compare(initial_result_, result), RerunAttempt::kInPlace);
    if (comparison > tolerance) {
      if (!fatal) continue_requested_ = true;
      log_failure(rank,
                  "First rerun: unexpected result is not reproducible within the tolerance (" +
                      number(result) + " != " + number(initial_result_) + ")",
                  fatal);
      record(rank, RerunValidationStatus::kFirstRerunNotReproducible, result, message);
      log_failure(rank, "Possible transient error!", fatal);
      return;
    }
    if (fatal) {
      checkpoint_requested_ = true;
    } else {
      continue_requested_ = true;
    }
    // Where it ran: the re-run from the checkpoint must run elsewhere to tell.
    suspicious_node_ = placement_.nodes[rank];
    suspicious_device_ = placement_.devices[rank];
    record(rank, RerunValidationStatus::kFirstRerunReproducible, result, message);
    log_failure(rank,
                "First rerun: unexpected result is reproducible within the tolerance (" +
                    number(result) + " = " + number(initial_result_) +
                    "). Need to rerun on a different GPU to verify correctness.",
                fatal);
    return;
  }
  // The second re-run, in a job restarted from the checkpoint.
  const double comparison =
      injector_.maybe_miscompare(compare(initial_result_, result), RerunAttempt::kFromCheckpoint);
  if (placement_.nodes[rank] == suspicious_node_ &&
      placement_.devices[rank] == suspicious_device_) {
    log_warning(
        "Got rescheduled on the same GPU. Need to resume again from the same checkpoint "
        "(node: " +
        suspicious_node_ + ", gpu: " + suspicious_device_ + ")");
    restart_again_requested_ = true;
  } else if (comparison > tolerance) {
    record(rank, RerunValidationStatus::kSecondRerunNotReproducible, result, message);
    log_warning(
        "Second rerun: unexpected result is not reproducible on a different GPU, therefore was "
        "likely incorrect (" +
        number(result) + " != " + number(initial_result_) + ")");
    log_failure(rank, "Possible persistent error!", true);
    if (!fatal) continue_requested_ = true;
  } else {
    record(rank, RerunValidationStatus::kSecondRerunReproducible, result, message);
    log_warning(
        "Second rerun: unexpected result is reproducible on a different GPU, therefore it was "
        "likely correct (" +
        number(result) + " = " + number(initial_result_) + ")");
    log_failure(rank, "Correct result (but possible Application error) (" + message + ")", true);
    if (!fatal) continue_requested_ = true;
  }
}

bool RerunStateMachine::is_unexpectedly_large(double value, double threshold,
                                              const std::string& context, int64_t samples) {
  value = std::fabs(value);
  if (!std::isfinite(value)) return false;  // NaN and inf have their own checks
  int64_t& count = large_value_counts_[context];
  double& max = max_values_[context];
  if (count < samples) {
    ++count;
    max = std::max(max, value);
    if (count == samples) log_warning("Max value for " + context + ": " + number(max));
    return false;
  }
  return value >= max * threshold;
}

void RerunStateMachine::report_stats() {
  log_line("Stats on computation determinism in validation calls");
  for (const auto& [message, s] : stats_) {
    log_line("  From validation call '" + message + "':");
    if (s.total == s.identical) {
      log_line("    " + std::to_string(s.identical) + " samples, all identical");
    } else {
      log_line("    " + std::to_string(s.total) + "/" + std::to_string(s.identical) +
               " total/identical samples, rel. variability: avg= " +
               format_number(s.sum / double(s.total), "%.3E") +
               ", max: " + format_number(s.max, "%.3E"));
    }
  }
}

nlohmann::json RerunStateMachine::state_json(const std::string& layout) const {
  if (mode_ == RerunMode::kDisabled) return nullptr;
  nlohmann::json failed;
  if (failed_call_)
    failed = {{"message", failed_call_->message}, {"sequence", failed_call_->sequence}};
  return {{"mode", rerun_mode_name(mode_)},
          {"state", state_name(state_)},
          {"layout", layout},
          {"iteration", batch_.iteration},
          {"first_sample", batch_.first_sample},
          {"samples", batch_.samples},
          {"rerun_requested", rerun_requested_},
          {"checkpoint_requested", checkpoint_requested_},
          {"restart_again_requested", restart_again_requested_},
          {"continue_requested", continue_requested_},
          {"error_injector", injector_.state_json()},
          {"failed_validation_call", failed},
          // Bit-exact (JSON has no NaN): the re-run compares against it.
          {"initial_result_bits", std::bit_cast<uint64_t>(initial_result_)},
          {"suspicious_rank", suspicious_rank_},
          {"suspicious_node", suspicious_node_},
          {"suspicious_device", suspicious_device_},
          {"large_value_counts", large_value_counts_},
          {"max_values", max_values_}};
}

void RerunStateMachine::load_state_json(const nlohmann::json& state, const std::string& layout) {
  if (state.is_null() ||
      state_from_name(state.at("state").get<std::string>()) == RerunState::kNotRunningYet)
    return;
  if (mode_ == RerunMode::kDisabled) {
    log_warning("RerunStateMachine disabled via CLI, ignoring machine state saved in checkpoint");
    return;
  }
  if (state.at("layout").get<std::string>() != layout) {
    log_warning("Job sharding has changed: Rerun state will be ignored");
    return;
  }
  log_warning("Getting RerunStateMachine state from checkpoint. Will rerun step.");
  mode_ = rerun_mode_from_name(state.at("mode").get<std::string>());
  state_ = state_from_name(state.at("state").get<std::string>());
  batch_ = {state.at("iteration").get<int64_t>(), state.at("first_sample").get<int64_t>(),
            state.at("samples").get<int64_t>()};
  rerun_requested_ = state.at("rerun_requested").get<bool>();
  checkpoint_requested_ = state.at("checkpoint_requested").get<bool>();
  restart_again_requested_ = state.at("restart_again_requested").get<bool>();
  continue_requested_ = state.at("continue_requested").get<bool>();
  injector_.load_state_json(state.at("error_injector"));
  const nlohmann::json& failed = state.at("failed_validation_call");
  failed_call_.reset();
  if (!failed.is_null())
    failed_call_ =
        Call{failed.at("message").get<std::string>(), failed.at("sequence").get<int64_t>()};
  initial_result_ = std::bit_cast<double>(state.at("initial_result_bits").get<uint64_t>());
  suspicious_rank_ = state.at("suspicious_rank").get<int>();
  MT_REQUIRE(suspicious_rank_ >= 0 && size_t(suspicious_rank_) < placement_.nodes.size(),
             "the checkpoint's rerun state names rank ", suspicious_rank_,
             ", which this job does not have");
  suspicious_node_ = state.at("suspicious_node").get<std::string>();
  suspicious_device_ = state.at("suspicious_device").get<std::string>();
  large_value_counts_ = state.at("large_value_counts").get<std::map<std::string, int64_t>>();
  max_values_ = state.at("max_values").get<std::map<std::string, double>>();
}

void RerunStateMachine::abandon_pending_rerun(int64_t iteration) {
  if (state_ != RerunState::kWillRerunFromCheckpoint || batch_.iteration != iteration) return;
  log_warning("Iteration " + std::to_string(iteration) +
              " is skipped: its pending rerun from the checkpoint is abandoned");
  state_ = RerunState::kNotRunningYet;
  injector_ = configured_injector_;
}

}  // namespace megatron
