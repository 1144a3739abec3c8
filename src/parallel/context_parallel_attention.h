// ContextParallelAttention: the attention core of a context-parallel rank, by the layer's
// --cp-comm-type (Megatron-Core's names; docs/parallelism.md):
//   p2p         the K/V ring (parallel/ring_attention.h)
//   all_gather  every rank's K/V gathered at once (parallel/all_gather_attention.h)
//   a2a         Ulysses: an all-to-all over the whole CP group trades the sequence split for a
//               head split (parallel/ulysses_attention.h)
//   a2a+p2p     Ulysses within the first level of --hierarchical-context-parallel-sizes, the
//               ring across the second (ParallelState::hcp_a2a, hcp_p2p)
// All four compute the same function: causal attention of this rank's two chunks
// (parallel/context_parallel_layout.h) over the whole sequence, with the whole sequence's
// dropout masks.
//
// Layouts (model/attention.h): qkv, dqkv [2C, b, G, q + 2, d]; out, dout [2C, b, G·q·d];
// what the backward needs stays in Ctx (the exchange's own; see its header).
#pragma once

#include <string>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "parallel/context_parallel_blocks.h"
#include "parallel/ulysses_attention.h"

namespace megatron {

enum class CpCommType { kP2P, kAllGather, kA2A, kA2AP2P };

// Megatron's names: p2p, all_gather (or allgather), a2a, a2a+p2p. Throws Error naming
// --cp-comm-type and the choices for anything else.
CpCommType cp_comm_type_from_name(const std::string& name);
const char* cp_comm_type_name(CpCommType type);

class ContextParallelAttention {
 public:
  struct Ctx {
    Tensor lse;        // p2p, all_gather: f32 [2, b, G·q, C]
    UlyssesCtx heads;  // a2a, a2a+p2p: the head-split operands
  };

  // Uses ps.cp, or for a2a+p2p ps.hcp_a2a and ps.hcp_p2p (which must exist).
  ContextParallelAttention(CpCommType type, const ParallelState& ps);

  CpCommType type() const { return type_; }
  // The ranks an all-to-all splits the heads over (a2a: c; a2a+p2p: A; else 1).
  int a2a_size() const;

  // qkv → out (written, qkv's dtype); what the backward needs in ctx, in `arena`;
  // temporaries in `workspace`. Collective over the CP group.
  void forward(const Tensor& qkv, const CpAttentionParams& p, Tensor& out, Ctx& ctx, Arena& arena,
               Arena& workspace) const;
  // dqkv (written, contiguous, qkv's shape and dtype) given dout and the forward's qkv, out
  // and ctx. Temporaries in `arena`. Collective over the CP group.
  void backward(const Tensor& qkv, const Tensor& out, const Ctx& ctx, const Tensor& dout,
                const CpAttentionParams& p, Tensor& dqkv, Arena& arena) const;

 private:
  CpCommType type_;
  std::shared_ptr<Communicator> cp_, a2a_, p2p_;
};

}  // namespace megatron
