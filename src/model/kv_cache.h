// KvCache and InferenceCtx: the state of incremental (KV-cache) decoding with tensor
// parallelism (DESIGN.md §3 "Inference").
//
// Per layer, the keys and values of THIS rank's KV heads — its heads/t heads, or with
// grouped-query attention its groups/t KV groups (1 when there are fewer groups than ranks):
// [b, kv_heads_local, max_s, head_dim] in the compute dtype, preallocated (zeroed) once for the
// longest sequence the context will hold. Each row (a sequence's slot) has its own length:
// positions [0, length(row)) of it are filled; a forward step over s_new tokens writes
// positions [length(row), + s_new) of the rows it runs on and then advances them.
//   - Static batches (tasks/generation.h) run every row at one length (length(), advance()):
//     prompts of different lengths are fed Megatron's way, never with padding in the cache.
//   - Continuous batching (tasks/continuous_batch.h) runs any subset of the rows, each at its
//     own length (CacheRows), and frees a row for the next sequence with clear_row().
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"

namespace megatron {

struct LayerKv {
  Tensor k;  // [b, kv_heads_local, max_s, d] (keys after RoPE when the model uses it)
  Tensor v;  // [b, kv_heads_local, max_s, d]
};

// The cache rows one forward step runs on: row r of the step's batch is cache row slots[r]
// and its new positions start at starts[r] (that row's length).
struct CacheRows {
  std::vector<int64_t> slots, starts;
  int64_t size() const { return int64_t(slots.size()); }
  // Rows 0 .. n − 1 of an n-row cache, all at `start`: the static batch's step.
  bool whole_at(int64_t start, int64_t cache_batch) const;
};

class KvCache {
 public:
  KvCache() = default;
  KvCache(int num_layers, int64_t batch, int64_t heads_local, int64_t max_seq, int64_t head_dim,
          DType dtype, Device device);

  LayerKv& layer(int i) { return layers_.at(size_t(i)); }
  int num_layers() const { return int(layers_.size()); }
  int64_t batch() const { return batch_; }
  int64_t max_seq() const { return max_seq_; }
  // The length every row has (a static batch's; an error when the rows differ).
  int64_t length() const;
  int64_t length(int64_t row) const { return lengths_.at(size_t(row)); }
  // Marks n more positions of every row as filled (after every layer wrote them).
  void advance(int64_t n);
  // The same for the step's rows.
  void advance(const CacheRows& rows, int64_t n);
  // Forgets every position (the memory is kept for the next sequence batch).
  void clear();
  // Forgets one row's positions: the slot is free for another sequence.
  void clear_row(int64_t row) { lengths_.at(size_t(row)) = 0; }
  // The step's rows: every row at the common length (a static batch's step).
  CacheRows all_rows() const;
  size_t bytes() const;

 private:
  std::vector<LayerKv> layers_;
  int64_t batch_ = 0, max_seq_ = 0;
  std::vector<int64_t> lengths_;  // per row
};

// One batch of sequences being decoded: the cache, the step's activation arena (reset at
// every step: what a step returns lives until the next step on this context) and a per-layer
// scratch arena.
struct InferenceCtx {
  KvCache cache;
  Arena arena;
  Arena scratch;
  int64_t length() const { return cache.length(); }
  int64_t batch() const { return cache.batch(); }
};

}  // namespace megatron
