// Ring attention: causal self-attention over a sequence split by context parallelism
// (--context-parallel-size c, --cp-comm-type p2p; Liu et al. 2023, as Megatron-Core's
// Transformer Engine path does it), with the fused kernels of kernels/flash_attention.h.
//
// Each CP rank holds the local sequence of parallel/context_parallel_layout.h: chunks r and
// 2c − 1 − r of 2c chunks of S/(2c) positions. Its queries must meet the keys and values of
// every chunk. The ranks' K/V pass round the CP group as a ring (rank r sends to r + 1 and
// receives from r − 1), so at step i rank r holds the K/V of rank (r − i) mod c, and the next
// step's K/V travel while this step's blocks compute. Every block is one query chunk against
// one key chunk (S/(2c) × S/(2c)); by the chunks' global indices a block is skipped (keys after
// the queries), causal (the same chunk) or full (keys before the queries). The load-balanced
// layout gives every rank the same work: 3 blocks at step 0 and 2 at every other step.
// Each block's output and log-sum-exp are merged into the query chunk's running result
// (kernels/attention_merge.h); the result is the attention over the whole sequence.
//
// The backward walks the ring again with each rank's K/V, this time with a f32 gradient of
// them (dK, dV) travelling alongside: every rank adds its blocks' contributions and passes it
// on, so after c steps each rank's own dK/dV come home complete. A block's backward is the
// fused kernel's, given the merged output and log-sum-exp (the softmax normalizer of the whole
// row), which makes the block's probabilities exactly the whole attention's.
// Dropout draws each block's part of the whole sequence's mask
// (parallel/random.h attention_block_dropout_rows), so the masks equal those of one rank.
//
// Layouts (model/attention.h; heads group-major, G local KV groups of q query heads):
//   qkv, dqkv  [2C, b, G, q + 2, d]   the local sequence (C = S/(2c) positions per chunk)
//   out, dout  [2C, b, G·q·d]
//   lse        f32 [2, b, G·q, C]     per local chunk, the log-sum-exp of each query row
// Communication: point-to-point in the CP group (MPI, or NCCL on GPUs); per step the K/V of
// the local sequence [2C, b, G, 2, d] forward, and with them f32 dK/dV backward.
#pragma once

#include <cstdint>

#include "core/arena.h"
#include "distributed/communicator.h"
#include "parallel/context_parallel_layout.h"
#include "parallel/random.h"

namespace megatron {

struct RingAttentionParams {
  ContextParallelLayout layout;   // the whole sequence and this rank's chunks
  int64_t queries_per_group = 1;  // q
  float scale = 1.0f;             // 1/√d
  // Attention dropout (p > 0 with scope.enabled): the masks of the heads
  // [head_begin, + G·q) of layer `layer`, drawn as the unsplit attention draws them.
  float dropout_p = 0.0f;
  DropoutScope scope;
  int64_t layer = 0, head_begin = 0;
};

// qkv [2C, b, G, q + 2, d] → out [2C, b, G·q·d] (qkv's dtype), lse f32 [2, b, G·q, C].
// Collective over `cp` (its size and rank are the layout's). Temporaries in `workspace`.
void ring_attention_forward(Communicator& cp, const Tensor& qkv, const RingAttentionParams& p,
                            Tensor& out, Tensor& lse, Arena& workspace);

// The gradient of the forward's qkv given dout: dqkv (written, qkv's shape and dtype).
// `out` and `lse` are the forward's. Collective over `cp`. Temporaries in `arena`.
void ring_attention_backward(Communicator& cp, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const RingAttentionParams& p,
                             Tensor& dqkv, Arena& arena);

}  // namespace megatron
