#include "optim/distributed_optimizer.h"

#include <algorithm>

#include "core/error.h"

namespace megatron {

DpShard DpShard::of(int64_t total, int dp_size, int dp_rank) {
  return of(FlatRange{0, total}, dp_size, dp_rank);
}

DpShard DpShard::of(FlatRange part, int dp_size, int dp_rank) {
  MT_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size, "DP rank ", dp_rank, " of ", dp_size);
  MT_CHECK(0 <= part.begin && part.begin <= part.end, "DpShard of the flat elements [", part.begin,
           ", ", part.end, ")");
  DpShard s;
  s.total = part.end - part.begin;
  s.size = (s.total + dp_size - 1) / dp_size;
  s.begin = part.begin;
  s.range.begin = part.begin + std::min(s.total, int64_t(dp_rank) * s.size);
  s.range.end = part.begin + std::min(s.total, int64_t(dp_rank + 1) * s.size);
  return s;
}

DistributedShards DistributedShards::of(const ParameterStore& store, const ParallelState& ps) {
  DistributedShards shards;
  if (!ps.own_expert_grid()) {
    shards.dense = DpShard::of(store.flat_values().numel(), ps.dp_cp_size, ps.dp_cp_rank);
    return shards;
  }
  shards.dense = DpShard::of(store.dense_part(), ps.dp_cp_size, ps.dp_cp_rank);
  shards.experts = DpShard::of(store.expert_part(), ps.edp->size(), ps.edp->rank());
  return shards;
}

void all_gather_shards(ParameterStore& store, Communicator& dp, const DpShard& shard) {
  if (dp.size() == 1) return;
  Tensor& padded = store.padded_flat_values();  // f32 [≥ begin + d·k]
  MT_CHECK(shard.begin + shard.total <= store.flat_values().numel() &&
               shard.begin + shard.size * dp.size() <= padded.numel(),
           "all_gather_shards: ", dp.size(), " shards of ", shard.size, " for ", shard.total,
           " values from flat element ", shard.begin, " do not fit the store's ", padded.numel(),
           "; allocate the store with ParameterStore::allocate(data-parallel size)");
  Tensor whole = padded.slice(0, shard.begin, shard.begin + shard.size * dp.size());
  Tensor mine = whole.slice(0, int64_t(dp.rank()) * shard.size, (dp.rank() + 1) * shard.size);
  dp.all_gather(mine, whole);
}

void all_gather_shards(ParameterStore& store, const ParallelState& ps,
                       const DistributedShards& shards) {
  all_gather_shards(store, *ps.dp_cp, shards.dense);
  if (shards.experts) all_gather_shards(store, *ps.edp, *shards.experts);
}

}  // namespace megatron
