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
#pragma once

#include <memory>

#include "core/tensor.h"

namespace megatron {

enum class ReduceOp { SUM, MAX };

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
  virtual void send(const Tensor& t, int dst, int tag = 0) = 0;
  virtual void recv(Tensor& t, int src, int tag = 0) = 0;
  virtual void barrier() = 0;
  // Members with the same color form a new group, ordered by key (then by old rank).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  // Convenience for scalars (e.g. norms, overflow flags, loss sums): all-reduce of one f64.
  double all_reduce_scalar(double value, ReduceOp op = ReduceOp::SUM);
};

}  // namespace megatron
