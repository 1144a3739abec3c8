// Agreement on failure: a step that every rank runs (validating the flags, opening the data,
// loading or writing a checkpoint) either succeeds on every rank or fails on every rank —
// never with some ranks failing and the others waiting forever in their next collective.
//
// run_on_all_ranks runs the step, then one all-reduce tells every rank whether any failed.
// If one did, every rank throws an Error marked collective (core/error.h): the lowest
// failing rank its own error (it prints the message), the others a silent one. The CLI then
// ends every rank cleanly with exit code 1 and exactly one "error: ..." line, instead of
// MPI_Abort and one interleaved line per rank.
#pragma once

#include <functional>
#include <string>

#include "distributed/communicator.h"

namespace megatron {

// `what`: when not empty, prefixes the reported message ("writing the checkpoint: ...").
// Collective over `world`; `step` itself must not communicate over it (a failing rank
// would leave the others in that collective).
void run_on_all_ranks(Communicator& world, const std::string& what,
                      const std::function<void()>& step);

// Throws, on every rank, an Error marked collective that rank `reporting_rank` prints: for
// a condition every rank has established identically (e.g. from all-reduced values).
[[noreturn]] void throw_collective_error(Communicator& world, int reporting_rank,
                                         const std::string& message);

}  // namespace megatron
