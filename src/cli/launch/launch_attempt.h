// The environment variable by which `megatron launch` tells the job it runs which attempt it
// is (0: the first run, n: the n-th restart). Training reads it for one purpose: faults
// injected with --error-injection-rate are drawn anew on each attempt
// (train/rerun_error_injector.h), as a transient fault of real hardware does not come back when the
// job restarts.
#pragma once

#include <cstdint>

namespace megatron::cli {

inline constexpr const char* kLaunchAttemptVariable = "MEGATRON_LAUNCH_ATTEMPT";

// The attempt the environment names; 0 when unset. Throws Error when it is not a
// non-negative integer.
int64_t launch_attempt_from_environment();

}  // namespace megatron::cli
