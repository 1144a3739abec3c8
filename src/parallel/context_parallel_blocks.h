// The blocks of context-parallel causal attention: a CP rank's two query chunks against the
// keys and values of any CP rank's local sequence, one block (query chunk × key chunk) at a
// time, merged by log-sum-exp. The exchanges that bring the other ranks' K/V share it: the
// ring (parallel/ring_attention.h, --cp-comm-type p2p) meets them one at a time as they come
// round, the all-gather (parallel/all_gather_attention.h, --cp-comm-type all_gather) holds
// them all at once. Both meet the sources in the same order, so their forwards give the same
// bits (the backwards sum each dK/dV in another order).
//
// Every block is one query chunk against one key chunk (C × C positions); by the chunks'
// global indices (parallel/context_parallel_layout.h) a block is skipped (keys after the
// queries), causal (the same chunk) or full (keys before the queries). Each block runs the
// fused kernel (kernels/flash_attention.h) and its output and log-sum-exp are merged into the
// query chunk's running result (kernels/attention_merge.h); the result is the attention over
// the whole sequence. A block's backward is the fused kernel's given the merged output and
// log-sum-exp (the softmax normalizer of the whole row), which makes the block's probabilities
// exactly the whole attention's. Dropout draws each block's part of the whole sequence's mask
// (parallel/random.h attention_block_dropout_rows), so the masks equal those of one rank.
//
// Layouts (model/attention.h; heads group-major, G local KV groups of q query heads):
//   qkv, dqkv  [2C, b, G, q + 2, d]   the local sequence (C = S/(2c) positions per chunk)
//   kv, dkv    [2C, b, G, 2, d]       a source rank's keys and values (dkv f32)
//   out, dout  [2C, b, G·q·d]
//   lse        f32 [2, b, G·q, C]     per local chunk, the log-sum-exp of each query row
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/arena.h"
#include "kernels/flash_attention.h"
#include "parallel/context_parallel_layout.h"
#include "parallel/random.h"

namespace megatron {

struct CpAttentionParams {
  ContextParallelLayout layout;   // the whole sequence and this rank's chunks
  int64_t queries_per_group = 1;  // q
  float scale = 1.0f;             // 1/√d
  // Attention dropout (p > 0 with scope.enabled): the masks of the heads
  // [head_begin, + G·q) of layer `layer`, drawn as the unsplit attention draws them.
  float dropout_p = 0.0f;
  DropoutScope scope;
  int64_t layer = 0, head_begin = 0;
};

// The shape of the problem (checked against qkv once).
struct CpBlockShape {
  int64_t chunk, b, groups, q, d;  // chunk: C positions per local chunk
  CpBlockShape(const Tensor& qkv, const CpAttentionParams& p);
  int64_t heads() const { return groups * q; }
  Shape kv_shape() const { return {2 * chunk, b, groups, 2, d}; }
};

// Runs the forward blocks into out and lse (both written; see the layouts above).
class CpBlocksForward {
 public:
  // Temporaries in `workspace`; qkv, out and lse must outlive this object.
  CpBlocksForward(const Tensor& qkv, const CpAttentionParams& p, Tensor& out, Tensor& lse,
                  Arena& workspace);
  // Meets the K/V of CP rank `source`; `between` runs after each block (it progresses
  // transfers in flight). This rank's own K/V must come first (its diagonal blocks start every
  // query chunk's result with a block that reaches all of its rows).
  void meet(const Tensor& kv, int source, const std::function<void()>& between);

 private:
  const Tensor& qkv_;
  const CpAttentionParams& p_;
  CpBlockShape shape_;
  Tensor &out_, &lse_;
  Tensor packed_, block_out_, block_lse_;
  bool started_[2] = {false, false};
  std::vector<kernels::MaskRow> rows_;
};

// Runs the backward blocks: the local queries' gradient accumulates inside, each source's
// dK/dV into the caller's f32 buffer.
class CpBlocksBackward {
 public:
  // out and lse are the forward's; temporaries in `arena`.
  CpBlocksBackward(const Tensor& qkv, const Tensor& out, const Tensor& lse, const Tensor& dout,
                   const CpAttentionParams& p, Arena& arena);
  // Adds the blocks' gradients against CP rank `source`'s K/V: dK/dV to `dkv` (f32).
  void meet(const Tensor& kv, int source, Tensor& dkv, const std::function<void()>& between);
  // dqkv (qkv's shape and dtype) ← the local queries' gradient and `own_dkv`, the complete f32
  // dK/dV of this rank's K/V.
  void finish(const Tensor& own_dkv, Tensor& dqkv);

 private:
  const Tensor &qkv_, &out_, &lse_, &dout_;
  const CpAttentionParams& p_;
  CpBlockShape shape_;
  Tensor dq_, packed_, dpacked_, q_staging_, kv_staging_, q_narrow_, kv_narrow_;
  std::vector<kernels::MaskRow> rows_;
};

}  // namespace megatron
