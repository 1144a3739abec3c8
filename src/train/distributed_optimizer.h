// The distributed optimizer (Megatron's --use-distributed-optimizer, ZeRO stage 1): each
// data-parallel rank keeps the Adam moments (and fp32 master weights) of one contiguous shard of
// the flat parameter space only, so optimizer memory shrinks by the DP size.
//
//   flat space [n] padded to [d·k], k = ceil(n/d); DP rank r owns [r·k, min((r+1)·k, n))
//   step: reduce-scatter the gradients (sum) into the rank's shard — bucket by bucket, each
//         bucket's segment of every rank's shard to that rank (train/grad_buckets.h) → unscale,
//         norm, clip on the shard → AdamW on the shard → all-gather the updated shards into
//         every rank's values
//
// The reduce-scatter sums what the DP all-reduce sums, and AdamW is elementwise, so a run is the
// same with or without it (up to the order of the DP sum's additions). Checkpoints stay
// layout-free: at save the moments are all-gathered into the usual full-size buffers (written by
// DP rank 0 as always), at load the full buffers are read and each rank keeps its shard, so a
// checkpoint reloads at any DP size, with or without the distributed optimizer.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.h"
#include "distributed/communicator.h"
#include "train/optimizer.h"

namespace megatron {

struct DpShard {
  int64_t total = 0;  // n: elements of the flat space
  int64_t size = 0;   // k: elements per rank (the last rank's shard may hold fewer real ones)
  FlatRange range;    // this rank's real elements [r·k, min((r+1)·k, n))

  static DpShard of(int64_t total, int dp_size, int dp_rank);
};

// Every rank's shard of `flat` (f32 [n]) copied into every rank's `flat`.
void all_gather_shards(Tensor& flat, Communicator& dp, const DpShard& shard);

// Shard-sized buffers (name → f32 [range length]) all-gathered into full-size ones (f32 [n]).
std::map<std::string, Tensor> gather_shard_buffers(const std::map<std::string, Tensor>& shards,
                                                   Communicator& dp, const DpShard& shard);

}  // namespace megatron
