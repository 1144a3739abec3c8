#include "train/rerun_error_injector.h"

#include <limits>

#include "core/error.h"
#include "core/logging.h"
#include "core/philox.h"

namespace megatron {

namespace {

// Keys the injection draws apart from every other Philox stream of the run.
constexpr uint64_t kInjectionSite = 0x52455255'4e494e4aull;  // "RERUNINJ"

// Megatron's names in its "Injecting error type ..." warning.
const char* log_name(RerunDiagnostic d) {
  switch (d) {
    case RerunDiagnostic::kCorrectResult:
      return "Expected result";
    case RerunDiagnostic::kTransientError:
      return "Transient error";
    case RerunDiagnostic::kPersistentError:
      return "Persistent error";
  }
  MT_CHECK(false, "unknown rerun diagnostic");
}

}  // namespace

const char* rerun_diagnostic_name(RerunDiagnostic d) {
  switch (d) {
    case RerunDiagnostic::kCorrectResult:
      return "correct_result";
    case RerunDiagnostic::kTransientError:
      return "transient_error";
    case RerunDiagnostic::kPersistentError:
      return "persistent_error";
  }
  MT_CHECK(false, "unknown rerun diagnostic");
}

RerunDiagnostic rerun_diagnostic_from_name(const std::string& name) {
  for (RerunDiagnostic d : {RerunDiagnostic::kCorrectResult, RerunDiagnostic::kTransientError,
                            RerunDiagnostic::kPersistentError})
    if (name == rerun_diagnostic_name(d)) return d;
  MT_THROW(
      "--error-injection-type must be correct_result, transient_error or persistent_error, "
      "got '",
      name, "'");
}

std::optional<int> RerunErrorInjector::maybe_inject(int64_t iteration, int64_t call,
                                                    int world_size) {
  if (rate_ <= 0 || injected_) return std::nullopt;
  for (int rank = 0; rank < world_size; ++rank) {
    // The first attempt keeps the key it always had, so its draws do not depend on launch.
    const uint64_t key =
        launch_attempt_ == 0
            ? philox_key({kInjectionSite, uint64_t(rank), uint64_t(iteration), uint64_t(call)})
            : philox_key({kInjectionSite, uint64_t(rank), uint64_t(iteration), uint64_t(call),
                          uint64_t(launch_attempt_)});
    const PhiloxStream draws(seed_, key);
    const uint64_t draw = (uint64_t(draws.u32(0)) << 32) | draws.u32(1);
    if (draw % uint64_t(rate_) != 0) continue;
    injected_ = type_;
    log_warning(std::string("Injecting error type ") + log_name(type_));
    return rank;
  }
  return std::nullopt;
}

double RerunErrorInjector::maybe_miscompare(double natural, RerunAttempt attempt) {
  if (!injected_) return natural;
  constexpr double kMatch = 0.0, kMismatch = std::numeric_limits<double>::infinity();
  const RerunDiagnostic injected = *injected_;
  if (attempt == RerunAttempt::kInPlace) {
    if (injected != RerunDiagnostic::kTransientError) return kMatch;
    injected_.reset();
    return kMismatch;
  }
  MT_CHECK(injected != RerunDiagnostic::kTransientError,
           "a transient fault ends at the first re-run");
  injected_.reset();
  return injected == RerunDiagnostic::kPersistentError ? kMismatch : kMatch;
}

nlohmann::json RerunErrorInjector::state_json() const {
  return {{"error_injection_rate", rate_},
          {"error_injection_type", rerun_diagnostic_name(type_)},
          {"injected_error_type",
           injected_ ? nlohmann::json(rerun_diagnostic_name(*injected_)) : nlohmann::json()}};
}

void RerunErrorInjector::load_state_json(const nlohmann::json& state) {
  rate_ = state.at("error_injection_rate").get<int64_t>();
  type_ = rerun_diagnostic_from_name(state.at("error_injection_type").get<std::string>());
  const nlohmann::json& injected = state.at("injected_error_type");
  injected_.reset();
  if (!injected.is_null()) injected_ = rerun_diagnostic_from_name(injected.get<std::string>());
}

}  // namespace megatron
