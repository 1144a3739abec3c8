#include "parallel/all_gather_attention.h"

#include "kernels/elementwise.h"

namespace megatron {

namespace {

void check_group(const CpAttentionParams& p, const Communicator& cp) {
  MT_CHECK(p.layout.cp_size == cp.size() && p.layout.cp_rank == cp.rank(),
           "all-gather attention: layout of CP ", p.layout.cp_rank, "/", p.layout.cp_size,
           " on group rank ", cp.rank(), "/", cp.size());
}

// Every CP rank's K/V, [c, 2C, b, G, 2, d] (rank order), in `arena`.
Tensor gather_kv(Communicator& cp, const Tensor& qkv, const CpBlockShape& shape, Arena& arena) {
  Tensor own = arena.alloc(shape.kv_shape(), qkv.dtype());
  kernels::copy(qkv.slice(3, shape.q, shape.q + 2), own);
  Shape all_shape = shape.kv_shape();
  all_shape.insert(all_shape.begin(), cp.size());
  Tensor all = arena.alloc(all_shape, qkv.dtype());
  Tensor flat = all.view({-1, shape.b, shape.groups, 2, shape.d});  // [c·2C, b, G, 2, d]
  cp.all_gather(own, flat);
  return all;
}

// The source of the i-th K/V met: the ring's order (own first).
int source_of(int i, const Communicator& cp) {
  return (cp.rank() - i + cp.size()) % cp.size();
}

const std::function<void()> kNothing = [] {};

}  // namespace

void all_gather_attention_forward(Communicator& cp, const Tensor& qkv, const CpAttentionParams& p,
                                  Tensor& out, Tensor& lse, Arena& workspace) {
  check_group(p, cp);
  CpBlocksForward blocks(qkv, p, out, lse, workspace);
  const Tensor all = gather_kv(cp, qkv, CpBlockShape(qkv, p), workspace);
  for (int i = 0; i < cp.size(); ++i) {
    const int source = source_of(i, cp);
    blocks.meet(all.select(0, source), source, kNothing);
  }
}

void all_gather_attention_backward(Communicator& cp, const Tensor& qkv, const Tensor& out,
                                   const Tensor& lse, const Tensor& dout,
                                   const CpAttentionParams& p, Tensor& dqkv, Arena& arena) {
  check_group(p, cp);
  CpBlocksBackward blocks(qkv, out, lse, dout, p, arena);
  const CpBlockShape shape(qkv, p);
  const Tensor all = gather_kv(cp, qkv, shape, arena);
  Tensor dall = arena.zeros(all.shape(), DType::F32);  // every source's dK/dV from this rank
  for (int i = 0; i < cp.size(); ++i) {
    const int source = source_of(i, cp);
    Tensor dkv = dall.select(0, source);
    blocks.meet(all.select(0, source), source, dkv, kNothing);
  }
  Tensor own = arena.alloc(shape.kv_shape(), DType::F32);
  cp.reduce_scatter(dall.view({-1, shape.b, shape.groups, 2, shape.d}), own);
  blocks.finish(own, dqkv);
}

}  // namespace megatron
