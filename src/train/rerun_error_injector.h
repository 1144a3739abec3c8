// --error-injection-rate N and --error-injection-type (Megatron's flags): faults injected into
// the rerun state machine's validations (rerun_state_machine.h), so that its paths — a
// transient fault, a persistent (hardware) fault, a correct but unexpected result — can be
// exercised on healthy hardware.
//
// As Megatron's RerunErrorInjector: each validation of an initial run is rejected with
// probability 1/N on each rank, at most one injection pending at a time; the comparison on the
// re-runs is then forced as the fault type says:
//   type              1st re-run (same device)   2nd re-run (another device, after a restart)
//   transient_error   differs                    —
//   persistent_error  identical                  differs
//   correct_result    identical                  identical
//
// The draws are a pure function of (--seed, rank, iteration, validation), from Philox, where
// Megatron draws from Python's `random` (seeded and checkpointed, so also reproducible), and of
// the restart attempt of `megatron launch` (cli/launch/launch_attempt.h): a restarted job
// draws new faults, as a transient fault of real hardware does not come back on a restart —
// without it, the restart would inject the same fault at the same iteration again. All
// ranks compute every rank's draws, so every rank knows which rank injected without
// communicating: the machine's state stays identical on all ranks.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace megatron {

// Megatron's RerunDiagnostic: what a rejected result turned out to be.
enum class RerunDiagnostic { kCorrectResult, kTransientError, kPersistentError };
const char* rerun_diagnostic_name(RerunDiagnostic d);  // "correct_result", ...
// Throws Error naming the flag and the accepted values.
RerunDiagnostic rerun_diagnostic_from_name(const std::string& name);

// Where a re-run stands, for the forced comparison.
enum class RerunAttempt { kInPlace, kFromCheckpoint };

class RerunErrorInjector {
 public:
  RerunErrorInjector(int64_t rate, RerunDiagnostic type, uint64_t seed, int64_t launch_attempt = 0)
      : rate_(rate), type_(type), seed_(seed), launch_attempt_(launch_attempt) {}

  // The rank (of `world_size`) that injects a fault into validation `call` (0-based, in this
  // iteration) of 1-based `iteration`, the lowest when several draw one; none when no rank
  // does or an injection is pending. Marks the injection pending.
  std::optional<int> maybe_inject(int64_t iteration, int64_t call, int world_size);

  // The comparison of a re-run's result with the initial one: `natural` (0: identical) unless
  // an injection is pending, then the forced one (0 or infinity); ends the injection when
  // the fault type has shown all its behaviour.
  double maybe_miscompare(double natural, RerunAttempt attempt);

  // Megatron's checkpointed injector: rate, type and the pending injection.
  nlohmann::json state_json() const;
  void load_state_json(const nlohmann::json& state);

 private:
  int64_t rate_;
  RerunDiagnostic type_;
  uint64_t seed_;
  int64_t launch_attempt_;
  std::optional<RerunDiagnostic> injected_;
};

}  // namespace megatron
