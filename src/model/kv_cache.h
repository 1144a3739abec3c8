// KvCache and InferenceCtx: the state of incremental (KV-cache) decoding with tensor
// parallelism (DESIGN.md §3 "Inference").
//
// Per layer, the keys and values of THIS rank's KV heads — its heads/t heads, or with
// grouped-query attention its groups/t KV groups (1 when there are fewer groups than ranks):
// [b, kv_heads_local, max_s, head_dim] in the compute dtype, preallocated once for the
// longest sequence the context will hold. Positions [0, length) are filled; a forward step
// over s_new tokens writes positions [length, length + s_new) and then advances length. Rows
// of the batch share one length: a batch of prompts of different lengths is fed Megatron's way
// (tasks/generation.h), never with padding in the cache.
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

class KvCache {
 public:
  KvCache() = default;
  KvCache(int num_layers, int64_t batch, int64_t heads_local, int64_t max_seq, int64_t head_dim,
          DType dtype, Device device);

  LayerKv& layer(int i) { return layers_.at(size_t(i)); }
  int num_layers() const { return int(layers_.size()); }
  int64_t batch() const { return batch_; }
  int64_t max_seq() const { return max_seq_; }
  int64_t length() const { return length_; }
  // Marks n more positions as filled (after every layer wrote them).
  void advance(int64_t n);
  // Forgets every position (the memory is kept for the next sequence batch).
  void clear() { length_ = 0; }
  size_t bytes() const;

 private:
  std::vector<LayerKv> layers_;
  int64_t batch_ = 0, max_seq_ = 0, length_ = 0;
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
