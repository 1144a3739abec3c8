#include "parallel/ring_attention.h"

#include <chrono>
#include <memory>
#include <vector>

#include "kernels/elementwise.h"

namespace megatron {

namespace {

// The ring's geometry: this rank, its neighbours and whose K/V it holds at each step.
struct Ring {
  int size, rank;

  Ring(const CpAttentionParams& p, const Communicator& cp) : size(cp.size()), rank(cp.rank()) {
    MT_CHECK(size >= 2, "ring attention needs a context-parallel group of 2 or more ranks");
    MT_CHECK(p.layout.cp_size == size && p.layout.cp_rank == rank, "ring attention: layout of CP ",
             p.layout.cp_rank, "/", p.layout.cp_size, " on group rank ", rank, "/", size);
  }
  // The rank whose K/V this rank holds at step i.
  int source(int step) const { return (rank - step + size) % size; }
  int next() const { return (rank + 1) % size; }
  int prev() const { return (rank - 1 + size) % size; }
};

// ring_attention_wait_seconds(): only the thread that trains runs the attention.
double wait_seconds = 0;

// Posts the exchange of one step: `out` to the next rank, `in` from the previous one.
CommRequests shift(Communicator& cp, const Ring& ring, const Tensor& out, Tensor& in) {
  CommRequests requests;
  requests.push_back(cp.irecv(in, ring.prev()));
  requests.push_back(cp.isend(out, ring.next()));
  return requests;
}

// wait_all, timed for ring_attention_wait_seconds().
void timed_wait_all(CommRequests& requests) {
  const auto start = std::chrono::steady_clock::now();
  wait_all(requests);
  wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

void ring_attention_forward(Communicator& cp, const Tensor& qkv, const CpAttentionParams& p,
                            Tensor& out, Tensor& lse, Arena& workspace) {
  const Ring ring(p, cp);
  CpBlocksForward blocks(qkv, p, out, lse, workspace);
  const CpBlockShape shape(qkv, p);
  Tensor kv[2] = {workspace.alloc(shape.kv_shape(), qkv.dtype()),
                  workspace.alloc(shape.kv_shape(), qkv.dtype())};
  kernels::copy(qkv.slice(3, shape.q, shape.q + 2), kv[0]);
  for (int step = 0; step < ring.size; ++step) {
    const Tensor& current = kv[step % 2];
    CommRequests requests;
    if (step + 1 < ring.size) requests = shift(cp, ring, current, kv[(step + 1) % 2]);
    blocks.meet(current, ring.source(step), [&requests] {
      for (const auto& r : requests) r->progress();
    });
    timed_wait_all(requests);
  }
}

void ring_attention_backward(Communicator& cp, const Tensor& qkv, const Tensor& out,
                             const Tensor& lse, const Tensor& dout, const CpAttentionParams& p,
                             Tensor& dqkv, Arena& arena) {
  const Ring ring(p, cp);
  CpBlocksBackward blocks(qkv, out, lse, dout, p, arena);
  const CpBlockShape shape(qkv, p);
  Tensor kv[2] = {arena.alloc(shape.kv_shape(), qkv.dtype()),
                  arena.alloc(shape.kv_shape(), qkv.dtype())};
  Tensor dkv[2] = {arena.zeros(shape.kv_shape(), DType::F32),
                   arena.alloc(shape.kv_shape(), DType::F32)};
  kernels::copy(qkv.slice(3, shape.q, shape.q + 2), kv[0]);
  for (int step = 0; step < ring.size; ++step) {
    const Tensor& current = kv[step % 2];
    Tensor& gradient = dkv[step % 2];
    CommRequests requests;
    if (step + 1 < ring.size) requests = shift(cp, ring, current, kv[(step + 1) % 2]);
    blocks.meet(current, ring.source(step), gradient, [&requests] {
      for (const auto& r : requests) r->progress();
    });
    timed_wait_all(requests);
    // This step's dK/dV go on to the next rank, which holds their K/V next; the gradient
    // arriving is that of the K/V this rank holds next (after the last step: its own). It is
    // complete only once this step's blocks are, so this transfer is not overlapped (the K/V's
    // is).
    requests = shift(cp, ring, gradient, dkv[(step + 1) % 2]);
    timed_wait_all(requests);
  }
  blocks.finish(dkv[ring.size % 2], dqkv);
}

double ring_attention_wait_seconds() {
  return wait_seconds;
}

}  // namespace megatron
