// Megatron's straggler report (`--log-straggler`, `--straggler-minmax-count`), from measured time:
// at the end of each log interval every rank contributes its time per iteration split into
// computing (everything outside communication) and communicating (inside an observed
// operation: distributed/observed_communicator.h, timed by CommunicationTimer). A rank that
// computes slowly makes the others wait: its compute time is the largest and its
// communication time the smallest, so the report names the ranks with the most compute time.
// (Megatron's detector times CUDA kernels and reads GPU clocks and power; here the split of wall
// time is what every backend has.)
#pragma once

#include <span>
#include <string>

namespace megatron {

// The report line for the interval ending at `iteration` of `iterations` iterations, from
// every rank's milliseconds per iteration (`compute_ms[r]`, `communication_ms[r]`, one entry
// per rank): the median and the `minmax_count` smallest and largest compute times with their
// ranks, the same for communication, and the ranks computing over 1.1x the median (stragglers).
std::string straggler_report(int64_t iteration, int64_t iterations,
                             std::span<const double> compute_ms,
                             std::span<const double> communication_ms, int minmax_count);

}  // namespace megatron
