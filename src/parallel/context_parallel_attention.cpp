#include "parallel/context_parallel_attention.h"

#include "core/error.h"
#include "parallel/all_gather_attention.h"
#include "parallel/ring_attention.h"

namespace megatron {

CpCommType cp_comm_type_from_name(const std::string& name) {
  if (name == "p2p") return CpCommType::kP2P;
  if (name == "all_gather" || name == "allgather") return CpCommType::kAllGather;
  if (name == "a2a") return CpCommType::kA2A;
  if (name == "a2a+p2p") return CpCommType::kA2AP2P;
  MT_THROW("--cp-comm-type '", name,
           "' is not known: expected p2p, all_gather, a2a or a2a+p2p (one for all layers, or "
           "one per layer)");
}

const char* cp_comm_type_name(CpCommType type) {
  switch (type) {
    case CpCommType::kP2P:
      return "p2p";
    case CpCommType::kAllGather:
      return "all_gather";
    case CpCommType::kA2A:
      return "a2a";
    case CpCommType::kA2AP2P:
      return "a2a+p2p";
  }
  return "?";
}

ContextParallelAttention::ContextParallelAttention(CpCommType type, const ParallelState& ps)
    : type_(type), cp_(ps.cp) {
  if (type == CpCommType::kA2A) a2a_ = ps.cp;
  if (type == CpCommType::kA2AP2P) {
    MT_REQUIRE(ps.hcp_a2a && ps.hcp_p2p,
               "--cp-comm-type a2a+p2p needs --hierarchical-context-parallel-sizes A P (A x P = "
               "--context-parallel-size): the all-to-all runs in groups of A ranks, the ring "
               "across the P groups");
    a2a_ = ps.hcp_a2a;
    p2p_ = ps.hcp_p2p;
  }
}

int ContextParallelAttention::a2a_size() const {
  return a2a_ ? a2a_->size() : 1;
}

void ContextParallelAttention::forward(const Tensor& qkv, const CpAttentionParams& p, Tensor& out,
                                       Ctx& ctx, Arena& arena, Arena& workspace) const {
  switch (type_) {
    case CpCommType::kP2P:
    case CpCommType::kAllGather: {
      ctx.lse = arena.alloc({2, qkv.size(1), qkv.size(2) * p.queries_per_group, p.layout.chunk()},
                            DType::F32);
      if (type_ == CpCommType::kP2P)
        ring_attention_forward(*cp_, qkv, p, out, ctx.lse, workspace);
      else
        all_gather_attention_forward(*cp_, qkv, p, out, ctx.lse, workspace);
      return;
    }
    case CpCommType::kA2A:
    case CpCommType::kA2AP2P:
      ulysses_attention_forward(*a2a_, p2p_.get(), qkv, p, out, ctx.heads, arena, workspace);
      return;
  }
}

void ContextParallelAttention::backward(const Tensor& qkv, const Tensor& out, const Ctx& ctx,
                                        const Tensor& dout, const CpAttentionParams& p,
                                        Tensor& dqkv, Arena& arena) const {
  switch (type_) {
    case CpCommType::kP2P:
      ring_attention_backward(*cp_, qkv, out, ctx.lse, dout, p, dqkv, arena);
      return;
    case CpCommType::kAllGather:
      all_gather_attention_backward(*cp_, qkv, out, ctx.lse, dout, p, dqkv, arena);
      return;
    case CpCommType::kA2A:
    case CpCommType::kA2AP2P:
      ulysses_attention_backward(*a2a_, p2p_.get(), ctx.heads, dout, p, dqkv, arena);
      return;
  }
}

}  // namespace megatron
