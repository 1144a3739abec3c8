#include "train/distributed_optimizer.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/elementwise.h"

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

namespace {

// `flat` [n] padded with zeros to [d·k] (a copy; the padding is what the last rank lacks).
Tensor padded(const Tensor& flat, const DpShard& shard, int dp_size) {
  Tensor out = Tensor::zeros({shard.size * dp_size}, DType::F32, flat.device());
  Tensor head = out.slice(0, 0, shard.total);
  kernels::copy(flat, head);
  return out;
}

}  // namespace

void all_gather_shards(Tensor& flat, Communicator& dp, const DpShard& shard) {
  if (dp.size() == 1) return;
  Tensor whole = padded(flat, shard, dp.size());
  Tensor mine =
      whole.slice(0, int64_t(dp.rank()) * shard.size, (dp.rank() + 1) * shard.size).clone();
  dp.all_gather(mine, whole);
  kernels::copy(whole.slice(0, 0, shard.total), flat);
}

}  // namespace megatron
