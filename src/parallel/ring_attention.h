// Ring attention: causal self-attention over a sequence split by context parallelism
// (--context-parallel-size c, --cp-comm-type p2p; Liu et al. 2023, as Megatron-Core's
// Transformer Engine path does it), computed block by block (parallel/context_parallel_blocks.h).
//
// Each CP rank holds the local sequence of parallel/context_parallel_layout.h: chunks r and
// 2c − 1 − r of 2c chunks of S/(2c) positions. Its queries must meet the keys and values of
// every chunk. The ranks' K/V pass round the CP group as a ring (rank r sends to r + 1 and
// receives from r − 1), so at step i rank r holds the K/V of rank (r − i) mod c, and the next
// step's K/V travel while this step's blocks compute. The load-balanced layout gives every
// rank the same work: 3 blocks at step 0 and 2 at every other step.
//
// The backward walks the ring again with each rank's K/V, this time with a f32 gradient of
// them (dK, dV) travelling alongside: every rank adds its blocks' contributions and passes it
// on, so after c steps each rank's own dK/dV come home complete.
//
// Layouts: parallel/context_parallel_blocks.h (qkv [2C, b, G, q + 2, d], out [2C, b, G·q·d],
// lse f32 [2, b, G·q, C]). Communication: point-to-point in the CP group (MPI, or NCCL on
// GPUs); per step the K/V of the local sequence [2C, b, G, 2, d] forward, and with them f32
// dK/dV backward.
#pragma once

#include "core/arena.h"
#include "distributed/communicator.h"
#include "parallel/context_parallel_blocks.h"

namespace megatron {

// qkv [2C, b, G, q + 2, d] → out [2C, b, G·q·d] (qkv's dtype), lse f32 [2, b, G·q, C].
// Collective over `cp` (its size and rank are the layout's). Temporaries in `workspace`.
void ring_attention_forward(Communicator& cp, const Tensor& qkv, const CpAttentionParams& p,
                            Tensor& out, Tensor& lse, Arena& workspace);

// The gradient of the forward's qkv given dout: dqkv (written, qkv's shape and dtype).
// `out` and `lse` are the forward's. Collective over `cp`. Temporaries in `arena`.
void ring_attention_backward(Communicator& cp, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const CpAttentionParams& p,
                             Tensor& dqkv, Arena& arena);

// Seconds this process has waited for the ring's transfers so far: what the blocks' compute
// did not hide, the ring's exposed communication (`megatron bench --mode step` reports its
// share of the step).
double ring_attention_wait_seconds();

}  // namespace megatron
