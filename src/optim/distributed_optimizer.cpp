#include "optim/distributed_optimizer.h"

#include <algorithm>

#include "core/error.h"

namespace megatron {

DpShard DpShard::of(int64_t total, int dp_size, int dp_rank) {
  MT_CHECK(dp_size >= 1 && dp_rank >= 0 && dp_rank < dp_size, "DP rank ", dp_rank, " of ", dp_size);
  DpShard s;
  s.total = total;
  s.size = (total + dp_size - 1) / dp_size;
  s.range.begin = std::min(total, int64_t(dp_rank) * s.size);
  s.range.end = std::min(total, s.range.begin + s.size);
  return s;
}

void all_gather_shards(ParameterStore& store, Communicator& dp, const DpShard& shard) {
  if (dp.size() == 1) return;
  Tensor& whole = store.padded_flat_values();  // f32 [d·k]
  MT_CHECK(shard.total == store.flat_values().numel() && whole.numel() == shard.size * dp.size(),
           "all_gather_shards: the store holds ", store.flat_values().numel(), " values in ",
           whole.numel(), " (", dp.size(), " shards of ", shard.size, " for ", shard.total,
           " expected); allocate the store with ParameterStore::allocate(data-parallel size)");
  Tensor mine = whole.slice(0, int64_t(dp.rank()) * shard.size, (dp.rank() + 1) * shard.size);
  dp.all_gather(mine, whole);
}

}  // namespace megatron
