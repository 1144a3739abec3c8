// The timing helpers of the bench modes: a monotonic clock and the mean seconds per call of a
// function on a device.
#pragma once

#include <functional>

#include "core/device.h"

namespace megatron::cli {

// Mean seconds per call of fn on `device`, after one warm-up call (which also builds oneDNN's
// cached primitive or cuBLASLt's plan), calling it until min_time has passed (and at least
// twice). On a GPU each call ends with a device synchronisation, so the figure is of finished
// work, not of queued launches.
// Seconds on the steady clock (its epoch is arbitrary: only differences mean anything).
double now_seconds();

double seconds_per_call(const std::function<void()>& fn, double min_time, Device device);

}  // namespace megatron::cli
