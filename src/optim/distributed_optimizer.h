// The distributed optimizer (Megatron's --use-distributed-optimizer, ZeRO stage 1): each
// data-parallel rank keeps the Adam moments (and, with --fp16 or --bf16, the fp32 master
// weights) of one contiguous shard of the flat parameter space only, so optimizer memory shrinks
// by the DP size.
//
//   a part of the flat space [n] padded to [d·k], k = ceil(n/d); rank r of the part's group
//   owns [r·k, min((r+1)·k, n)) of it; the store's value buffer is allocated padded
//   (ParameterStore::allocate), so the shards are d equal blocks of it and the all-gather needs
//   no temporary
//   step: reduce-scatter the gradients (sum) into the rank's shard — bucket by bucket, each
//         bucket's segment of every rank's shard to that rank (optim/grad_buckets.h) →
//         (--fp16: overflow check over the world, skip or unscale) → norm, clip on the shard →
//         AdamW on the shard → all-gather the updated shards into every rank's values
//
// The parts (DistributedShards): without an expert grid of its own (expert-model-parallel size
// 1 and the experts' tensor split the TP one) every rank of dp × cp holds the same parameters,
// and the whole flat space is one part sharded over dp × cp. Otherwise the ranks of dp × cp hold
// different experts, and — as Megatron-Core shards the expert parameters' state over the expert
// data-parallel group — the dense parameters (ParameterStore::dense_part) are sharded over
// dp × cp and the expert ones (expert_part) over edp (ParallelState::edp, the ranks holding the
// same experts); each rank owns one shard of each.
//
// The reduce-scatter sums what the DP all-reduce sums, AdamW is elementwise and an overflow
// anywhere is seen by every rank, so a run is the same with or without it (up to the order of
// the DP sum's additions). Checkpoints: every DP rank writes its own shard
// (save_checkpoint's OptimizerShard), described per parameter in full-tensor coordinates, so
// no full-size buffer is ever gathered, and a load at any TP × PP × DP layout, sharded or not,
// reads only the stored pieces that overlap what it holds (checkpoint/shards.h). With an expert
// grid of its own the state is gathered whole for a save and loaded whole before it is cut into
// the shards (the expert checkpoint path, checkpoint/checkpoint.h), transiently.
#pragma once

#include <cstdint>
#include <optional>

#include "core/tensor.h"
#include "distributed/communicator.h"
#include "distributed/parallel_state.h"
#include "parallel/flat_range.h"
#include "parallel/parameter.h"

namespace megatron {

struct DpShard {
  int64_t total = 0;  // n: elements of the part of the flat space
  int64_t size = 0;   // k: elements per rank (the last rank's shard may hold fewer real ones)
  FlatRange range;    // this rank's real elements [r·k, min((r+1)·k, n)), in flat coordinates
  int64_t begin = 0;  // the part's first flat element

  // Rank `dp_rank`'s shard of flat elements [0, total).
  static DpShard of(int64_t total, int dp_size, int dp_rank);
  // Rank `dp_rank`'s shard of `part` (end resolved).
  static DpShard of(FlatRange part, int dp_size, int dp_rank);
};

// A rank's distributed-optimizer shards: of the whole flat space over dp × cp, or (experts on a
// grid of their own) of the dense part over dp × cp and of the expert part over edp.
struct DistributedShards {
  DpShard dense;                   // the whole space, or the dense part
  std::optional<DpShard> experts;  // the expert part, when it is sharded over edp

  // This rank's shards of `store`'s flat space (allocated as trainer.cpp does:
  // ParameterStore::allocate(dp × cp size, ..., edp size when separate_expert_grid)).
  static DistributedShards of(const ParameterStore& store, const ParallelState& ps);
  // The shard an expert (or dense) parameter's elements fall in.
  const DpShard& of_kind(bool expert) const { return expert && experts ? *experts : dense; }
};

// Every rank's shard of the store's values copied into every rank's values, in place, over `dp`
// (the shard's group): the store must have been allocated padded to a multiple of its size.
void all_gather_shards(ParameterStore& store, Communicator& dp, const DpShard& shard);
// Both shards: the dense one over dp × cp, the expert one over edp.
void all_gather_shards(ParameterStore& store, const ParallelState& ps,
                       const DistributedShards& shards);

}  // namespace megatron
