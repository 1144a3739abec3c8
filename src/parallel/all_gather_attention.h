// All-gather context-parallel attention (--cp-comm-type all_gather; Megatron-Core hands it to
// Transformer Engine's KV all-gather path): every CP rank gathers the keys and values of the
// whole sequence at once, then computes its two query chunks' blocks against them
// (parallel/context_parallel_blocks.h), meeting the ranks' K/V in the ring's order, so the
// forward gives the ring's bits. One collective instead of c − 1 overlapped shifts, at the
// price of holding the whole sequence's K/V.
//
// The backward gathers the K/V again (nothing of the size of the whole sequence is kept
// between forward and backward), adds every block's dK/dV into an f32 gradient of the whole
// sequence's K/V and reduce-scatters it, so each rank receives the complete dK/dV of its own.
//
// Layouts: parallel/context_parallel_blocks.h. Communication in the CP group: forward an
// all-gather of [2C, b, G, 2, d] per rank; backward that all-gather again and a
// reduce-scatter of f32 [c·2C, b, G, 2, d].
#pragma once

#include "core/arena.h"
#include "distributed/communicator.h"
#include "parallel/context_parallel_blocks.h"

namespace megatron {

// qkv [2C, b, G, q + 2, d] → out [2C, b, G·q·d] (qkv's dtype), lse f32 [2, b, G·q, C].
// Collective over `cp` (its size and rank are the layout's). Temporaries in `workspace`.
void all_gather_attention_forward(Communicator& cp, const Tensor& qkv, const CpAttentionParams& p,
                                  Tensor& out, Tensor& lse, Arena& workspace);

// The gradient of the forward's qkv given dout: dqkv (written, qkv's shape and dtype).
// `out` and `lse` are the forward's. Collective over `cp`. Temporaries in `arena`.
void all_gather_attention_backward(Communicator& cp, const Tensor& qkv, const Tensor& out,
                                   const Tensor& lse, const Tensor& dout,
                                   const CpAttentionParams& p, Tensor& dqkv, Arena& arena);

}  // namespace megatron
