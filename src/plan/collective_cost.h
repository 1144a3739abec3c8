// Time of one collective over a process group, from the machine's links (α–β model of ring
// algorithms, as NCCL and Open MPI run large messages):
//   all-reduce       2(n−1)·α + 2(n−1)/n · S / B
//   all-gather,
//   reduce-scatter    (n−1)·α +  (n−1)/n · S / B     (S = the gathered / unreduced size)
//   all-to-all        (n−1)·α +  (n−1)/n · S / B     (S = what one rank holds before)
//   send/recv               α +           S / B
// B is the group's bus bandwidth. Within a node it is the per-device link (times its
// efficiency). Across nodes each device owns 1/(devices per node) of the node's network
// bandwidth, and a ring crossing nodes moves at most the share of its members on one node:
// B = min(intra-node B, network B · members per node / devices per node). Every group of
// the same kind runs its collective at the same time (TP groups in lock step, DP groups after
// the backward), which this sharing assumes.
#pragma once

#include <string>

#include "plan/machine.h"

namespace megatron::plan {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };

// Where the members of one group sit. Ranks follow Megatron's grid: TP groups are
// consecutive ranks, CP groups stride t, DP groups t·c, pipeline neighbours t·c·d.
struct GroupPlacement {
  int size = 1;              // members
  int members_per_node = 1;  // members of the group on one node
  bool spans_nodes = false;  // some member is on another node
};

// The placement of a group of `size` members whose consecutive members are `stride` ranks
// apart, on nodes of `devices_per_node` devices.
GroupPlacement place_group(int size, int stride, int devices_per_node);

// Seconds for `op` over `bytes` (see the table above); 0 for a group of one. Throws when the
// group spans nodes and the machine has no network description.
double collective_seconds(const Machine& machine, Collective op, double bytes,
                          const GroupPlacement& group);

const char* collective_name(Collective op);

}  // namespace megatron::plan
