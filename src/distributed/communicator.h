// Communicator: the collective and point-to-point operations every parallel part uses.
//
// Implementations: MpiCommunicator (OpenMPI; CUDA tensors staged through host memory),
// NcclCommunicator (CUDA tensors over NCCL, CPU tensors over its MPI twin), SoloCommunicator (a
// world of one: collectives are identities). All operations must be called by every member of
// the group in the same order. They are blocking for the caller: a host tensor holds the result
// when the call returns; a CUDA tensor holds it for all work queued after the call on the compute
// stream (NCCL returns once the operation is queued). Tensors must be contiguous, the tensors of
// one call on one device; dtypes f32, f64, bf16, f16 (sum in f32 semantics per element on MPI,
// in 16 bits on NCCL, see nccl_communicator.h), i32, i64, u8.
//
// Point-to-point also comes non-blocking (isend, irecv, sendrecv), for the pipeline schedules:
// the call returns at once with a CommRequest whose wait() completes it. The tensor must stay
// alive, and unchanged (isend) or unread (irecv), until wait() returns. Messages from one rank to
// another with one tag arrive in the order they were posted. Progress never depends on the
// library buffering a send eagerly: a rank that posts its receives and sends and then waits on
// them cannot deadlock against a peer that does the same in another order.
//
// The data-parallel gradient reduction also comes non-blocking (iall_reduce, ireduce_scatter),
// so that a bucket of gradients can be reduced while the backward computes the next ones
// (--overlap-grad-reduce, optim/grad_buckets.h). The tensors must stay alive and untouched until
// wait() returns. Reductions only: f32, f64, i32, i64 (not bf16/f16, whose MPI reduction is
// staged through f32 copies). On a CUDA tensor the operation is ordered after the compute work
// queued before the call and, once wait() returns, before the compute work queued after it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace megatron {

enum class ReduceOp { SUM, MAX };

// One non-blocking operation in flight. wait() returns once it is complete (an isend's tensor
// may be reused, an irecv's tensor holds the message) and throws Error on a transport failure or
// a size mismatch; waiting again does nothing. A request destroyed before wait() waits (and
// swallows the error: destructors must not throw), so an exception cannot leave MPI writing
// into freed memory.
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  // Lets the transport advance the operation without blocking. MPI moves a non-blocking
  // collective forward only inside MPI calls, so a caller that computes between posting and
  // waiting calls this now and then; NCCL and a world of one progress by themselves (no-op).
  virtual void progress() = 0;
};

// Requests posted together, waited for together.
using CommRequests = std::vector<std::unique_ptr<CommRequest>>;
// Waits for each request in order, then empties the list.
inline void wait_all(CommRequests& requests) {
  for (auto& r : requests) r->wait();
  requests.clear();
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual void all_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) = 0;  // in place
  // out = concatenation of every rank's `in` along dim 0, in rank order.
  // out.shape[0] == size() · in.shape[0]; other dims equal.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // in.shape[0] == size() · out.shape[0]; rank r receives the reduced r-th chunk.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::SUM) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  // All-to-all with per-peer counts (MPI_Alltoallv), in rows along dim 0 (the expert token
  // exchange: parallel/expert_token_exchange.h). `in` [Σ send_rows, ...] holds the rows for
  // rank 0, then those for rank 1, ...; `out` [Σ recv_rows, ...] receives recv_rows[r] rows from
  // rank r, in rank order. Both have size() counts (each >= 0), one dtype, one device and equal
  // trailing dims, and must not overlap. recv_rows[r] here must equal send_rows[rank()] on rank r:
  // the caller exchanges the counts first (neither MPI nor NCCL can be relied on to notice).
  virtual void all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                            std::span<const int64_t> recv_rows) = 0;
  virtual void send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual void recv(Tensor& t, int src, int tag = 0) = 0;
  // Non-blocking point-to-point (see above); dst/src != rank().
  virtual std::unique_ptr<CommRequest> isend(const Tensor& t, int dst, int tag = 0) = 0;
  virtual std::unique_ptr<CommRequest> irecv(Tensor& t, int src, int tag = 0) = 0;
  // Non-blocking all_reduce of t (in place).
  virtual std::unique_ptr<CommRequest> iall_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) = 0;
  // Non-blocking reduce-scatter with per-rank counts (MPI_Reduce_scatter), in place: `t`
  // [Σ counts] is the ranks' segments back to back in rank order, and rank r's segment of `t`
  // receives the reduced segment r — the distributed optimizer reduces each gradient bucket in
  // the gradient buffer itself, as Megatron's. The rest of `t` is undefined afterwards. Every
  // member passes the same counts (size() of them, each >= 0).
  virtual std::unique_ptr<CommRequest> ireduce_scatter(Tensor& t, std::span<const int64_t> counts,
                                                       ReduceOp op = ReduceOp::SUM) = 0;
  virtual void barrier() = 0;
  // Members with the same color form a new group, ordered by key (then by old rank).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Convenience for scalars (e.g. norms, overflow flags, loss sums): all-reduce of one f64.
  double all_reduce_scalar(double value, ReduceOp op = ReduceOp::SUM);
  // Sends `out` to `dst` while receiving `in` from `src` (both posted before either is waited
  // on, so two ranks exchanging with each other cannot deadlock); returns when both are done.
  // An undefined tensor skips that direction.
  void sendrecv(const Tensor& out, int dst, Tensor& in, int src, int tag = 0);
};

}  // namespace megatron
