// --result-rejected-tracker-filename (Megatron's flag): the file where the rerun state machine
// (rerun_state_machine.h) appends one line per rejected result and per verdict on it, and from
// which a restarted job learns which iterations to skip.
//
// One line per record, Megatron's format (its parser and ours read each other's files):
//   ts=<time> node=<host> device=<device> jobID=<$SLURM_JOBID or N/A> rank=<r> iteration=<n>
//   status=<status> result=<value> message='<check>' samples=<first>..<last>
// `iteration` is 1-based, `samples` names the global batch (consumed-sample indices) that the
// iteration trained on, so the offending batch can be found in the data.
//
// Skipping (Megatron's rule): an iteration is skipped by the next job when the same rank
// recorded it twice with a "reproducible" verdict (or twice with reruns disabled) — the
// result was wrong again on another device, so the data, not the hardware, is at fault —
// unless several ranks of one job recorded it (then the fault is not one batch's).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace megatron {

enum class RerunValidationStatus {
  kRerunDisabled,
  kInitialRun,
  kFirstRerunNotReproducible,
  kFirstRerunReproducible,
  kSecondRerunNotReproducible,
  kSecondRerunReproducible,
};
const char* rerun_validation_status_name(RerunValidationStatus status);  // "initial_run", ...

struct RerunTrackerRecord {
  std::string node, device;
  int rank = 0;
  int64_t iteration = 0;  // 1-based
  RerunValidationStatus status = RerunValidationStatus::kInitialRun;
  double result = 0;
  std::string message;
  int64_t first_sample = 0, samples = 0;  // the iteration's global batch
};

// Throws Error naming the file when it cannot be opened for appending (checked at start, as
// Megatron does, so that a typo is found before training).
void check_tracker_appendable(const std::string& file);

// Appends the record as one line; a write failure is logged, not fatal (Megatron's choice:
// the verdict is in the log too).
void append_tracker_record(const std::string& file, const RerunTrackerRecord& record);

// The 1-based iterations the file says to skip, sorted; none when the file does not exist.
std::vector<int64_t> iterations_to_skip_from_tracker(const std::string& file);

}  // namespace megatron
