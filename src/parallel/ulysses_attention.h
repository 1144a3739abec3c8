// Ulysses context-parallel attention (--cp-comm-type a2a, DeepSpeed-Ulysses, Jacobs et al.
// 2023) and its hierarchical form (--cp-comm-type a2a+p2p with
// --hierarchical-context-parallel-sizes A P), as Megatron-Core hands them to Transformer
// Engine.
//
// An all-to-all in a group of A CP ranks trades the sequence split for a head split: each
// member sends every other member that member's share (G/A of its G local KV groups, with
// their query heads) of its two chunks, and receives the same share of everyone's chunks.
// Afterwards a member holds the 2A chunks of its group for G/A groups; attention runs over
// them, and a second all-to-all gives the output back to the sequence split.
//
// The a2a groups are consecutive CP ranks (Megatron's hierarchical groups: level one [0, A),
// [A, 2A), ...; level two the ranks with the same rank in their level-one group). Group g of
// P holds chunks gA .. gA + A − 1 and their mirrors 2c − gA − A .. 2c − 1 − gA; placed in
// that order they are exactly the local sequence of the chunk layout at CP size P with chunks
// of A·C positions (parallel/context_parallel_layout.h): big chunks g and 2P − 1 − g. So
//   A = c (plain a2a, P = 1): the sequence is whole and in order; attention is the fused
//     causal kernel (kernels/flash_attention.h) over it, with the whole attention's dropout
//     mask for this rank's heads;
//   P > 1 (a2a+p2p): the ring (parallel/ring_attention.h) runs across the P groups, between
//     the ranks with the same head share, on the layout of CP size P.
// Member j of a group keeps groups [j·G/A, (j + 1)·G/A), heads head_begin + j·(G/A)·q on.
// G must be divisible by A (the caller says so to the user; Transformer Engine asserts it).
//
// Layouts (model/attention.h; heads group-major):
//   qkv, dqkv  [2C, b, G, q + 2, d]   this rank's local sequence (C = S/(2c))
//   out, dout  [2C, b, G·q·d]
//   saved      qkv [2AC, b, G/A, q + 2, d], out [2AC, b, G/A·q·d]: the head-split operands,
//              kept for the backward; lse f32 [b, G/A·q, S] (P = 1) or the ring's
//              [2, b, G/A·q, AC] (P > 1)
// Communication: forward an all-to-all of qkv and one of out in the a2a group; backward one of
// dout and one of dqkv; plus the ring's across the P groups.
#pragma once

#include "core/arena.h"
#include "distributed/communicator.h"
#include "parallel/context_parallel_blocks.h"

namespace megatron {

// What the forward keeps for the backward (in its arena).
struct UlyssesCtx {
  Tensor qkv, out, lse;
};

// qkv → out (qkv's dtype), `saved` filled in `arena`; temporaries in `workspace`. `p` is this
// rank's (layout of CP size c = A·P). Collective over `a2a` (size A, rank cp_rank mod A) and,
// when non-null, `p2p` (size P, rank cp_rank / A; null means P = 1).
void ulysses_attention_forward(Communicator& a2a, Communicator* p2p, const Tensor& qkv,
                               const CpAttentionParams& p, Tensor& out, UlyssesCtx& saved,
                               Arena& arena, Arena& workspace);

// dqkv (written; the forward's qkv shape and dtype, contiguous) ← dout, given the forward's
// `saved`. Collective as the forward. Temporaries in `arena`.
void ulysses_attention_backward(Communicator& a2a, Communicator* p2p, const UlyssesCtx& saved,
                                const Tensor& dout, const CpAttentionParams& p, Tensor& dqkv,
                                Arena& arena);

}  // namespace megatron
