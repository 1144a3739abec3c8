// comm_check: verification and bandwidth measurement of a job's communicators, behind the
// `megatron comm-check` diagnostic (verify a cluster before a long run).
//
// verify_collectives runs every Communicator operation on every dtype the trainer uses,
// with inputs derived from rank numbers, and compares each result element with the value
// computed independently from those rank numbers. A mismatch throws Error naming the
// operation, dtype, element, value and expected value.
#pragma once

#include <cstdint>

#include "distributed/communicator.h"
#include "distributed/parallel_state.h"

namespace megatron {

// Throws Error on the first wrong element. Collective: every member must call it.
void verify_collectives(Communicator& comm);

// Checks that each group of `state` (tp, dp, pp, mp) holds exactly the world ranks the
// Megatron grid formula puts there. Collective over the world.
void verify_groups(const ParallelState& state);

struct AllReduceBandwidth {
  int64_t bytes = 0;      // size of the f32 buffer reduced
  double seconds = 0;     // per all-reduce, slowest rank
  double algbw_gbps = 0;  // bytes / seconds, GB/s (1e9)
  double busbw_gbps = 0;  // algbw · 2(n-1)/n: the per-link traffic of a ring all-reduce
};

// Times `iterations` SUM all-reduces of an f32 buffer of `bytes` on `device` after one warm-up
// (on a GPU, until the device has finished them).
AllReduceBandwidth measure_all_reduce_bandwidth(Communicator& comm, int64_t bytes, int iterations,
                                                Device device = Device::CPU);

}  // namespace megatron
