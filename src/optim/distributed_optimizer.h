// The distributed optimizer (Megatron's --use-distributed-optimizer, ZeRO stage 1): each
// data-parallel rank keeps the Adam moments (and, with --fp16, the fp32 master weights) of one
// contiguous shard of the flat parameter space only, so optimizer memory shrinks by the DP size.
//
//   flat space [n] padded to [d·k], k = ceil(n/d); DP rank r owns [r·k, min((r+1)·k, n));
//   the store's value buffer is allocated padded (ParameterStore::allocate(d)), so the shards
//   are d equal blocks of it and the all-gather needs no temporary
//   step: reduce-scatter the gradients (sum) into the rank's shard — bucket by bucket, each
//         bucket's segment of every rank's shard to that rank (optim/grad_buckets.h) →
//         (--fp16: overflow check over the world, skip or unscale) → norm, clip on the shard →
//         AdamW on the shard → all-gather the updated shards into every rank's values
//
// The reduce-scatter sums what the DP all-reduce sums, AdamW is elementwise and an overflow
// anywhere is seen by every rank, so a run is the same with or without it (up to the order of
// the DP sum's additions). Checkpoints: every DP rank writes its own shard
// (save_checkpoint's OptimizerShard), described per parameter in full-tensor coordinates, so
// no full-size buffer is ever gathered, and a load at any TP × PP × DP layout, sharded or not,
// reads only the stored pieces that overlap what it holds (checkpoint/shards.h).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "distributed/communicator.h"
#include "optim/optimizer.h"

namespace megatron {

struct DpShard {
  int64_t total = 0;  // n: elements of the flat space
  int64_t size = 0;   // k: elements per rank (the last rank's shard may hold fewer real ones)
  FlatRange range;    // this rank's real elements [r·k, min((r+1)·k, n))

  static DpShard of(int64_t total, int dp_size, int dp_rank);
};

// Every rank's shard of the store's values copied into every rank's values, in place: the
// store must have been allocated padded to a multiple of the DP size.
void all_gather_shards(ParameterStore& store, Communicator& dp, const DpShard& shard);

}  // namespace megatron
