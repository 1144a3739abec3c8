#include "model/kv_cache.h"

#include <algorithm>

#include "kernels/elementwise.h"

namespace megatron {

KvCache::KvCache(int num_layers, int64_t batch, int64_t heads_local, int64_t max_seq,
                 int64_t head_dim, DType dtype, Device device)
    : batch_(batch), max_seq_(max_seq), lengths_(size_t(std::max<int64_t>(batch, 0)), 0) {
  MT_CHECK(num_layers >= 0 && batch >= 1 && heads_local >= 1 && max_seq >= 1 && head_dim >= 1,
           "KV cache: layers ", num_layers, ", batch ", batch, ", local heads ", heads_local,
           ", max sequence ", max_seq, ", head dim ", head_dim, " must be positive");
  // Zeroed: a decode step over rows of different lengths reads (and masks out) the positions
  // past a row's own, which must hold finite numbers (0 · NaN would poison the sum).
  for (int i = 0; i < num_layers; ++i) {
    LayerKv kv{Tensor::empty({batch, heads_local, max_seq, head_dim}, dtype, device),
               Tensor::empty({batch, heads_local, max_seq, head_dim}, dtype, device)};
    kernels::fill(kv.k, 0.0f);
    kernels::fill(kv.v, 0.0f);
    layers_.push_back(std::move(kv));
  }
}

bool CacheRows::whole_at(int64_t start, int64_t cache_batch) const {
  if (size() != cache_batch) return false;
  for (int64_t r = 0; r < size(); ++r)
    if (slots[size_t(r)] != r || starts[size_t(r)] != start) return false;
  return true;
}

int64_t KvCache::length() const {
  MT_CHECK(std::all_of(lengths_.begin(), lengths_.end(),
                       [&](int64_t n) { return n == lengths_.front(); }),
           "KV cache: its rows have different lengths (a continuous batch): ask length(row)");
  return lengths_.front();
}

void KvCache::advance(int64_t n) {
  advance(all_rows(), n);
}

void KvCache::advance(const CacheRows& rows, int64_t n) {
  for (int64_t slot : rows.slots) {
    int64_t& length = lengths_.at(size_t(slot));
    MT_CHECK(n >= 0 && length + n <= max_seq_, "KV cache row ", slot, ": ", length, " + ", n,
             " positions exceed its ", max_seq_);
    length += n;
  }
}

void KvCache::clear() {
  std::fill(lengths_.begin(), lengths_.end(), 0);
}

CacheRows KvCache::all_rows() const {
  CacheRows rows;
  const int64_t start = length();
  for (int64_t r = 0; r < batch_; ++r) {
    rows.slots.push_back(r);
    rows.starts.push_back(start);
  }
  return rows;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (const LayerKv& l : layers_) total += l.k.nbytes() + l.v.nbytes();
  return total;
}

}  // namespace megatron
