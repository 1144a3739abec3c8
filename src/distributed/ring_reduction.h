// The ring reduction behind MpiCommunicator's non-blocking all-reduce and reduce-scatter of host
// buffers (the data-parallel gradient buckets).
//
// Why not MPI_Iallreduce / MPI_Ireduce_scatter: OpenMPI runs them in libnbc, whose
// reduce-scatter reduces the whole buffer onto one rank and scatters it from there, and whose
// all-reduce is no better; on 2 ranks of one machine, 160 MB of f32 took 128 ms
// (MPI_Ireduce_scatter) and 176 ms (MPI_Iallreduce) where a ring takes 25 ms for the
// reduce-scatter (bench/RESULTS.md, "Ring reduction").
//
// The buffer is cut into size() segments (rank r's is segment r). Reduce-scatter, p − 1 steps:
// at step k rank r sends its partial sum of segment (r − k − 1) mod p to rank r + 1 and receives
// rank r − 1's partial sum of segment (r − k − 2) mod p, which it adds into its own; after the
// last step segment r holds the sum over all ranks. All-reduce follows with p − 1 all-gather
// steps: at step k rank r sends segment (r − k) mod p and receives segment (r − k − 1) mod p in
// place. Every segment is summed on one rank in a fixed order and copied to the others, so all
// ranks hold bit-identical results, and reruns give the same bits.
//
// Non-blocking: the first step is posted at once; progress() moves on when a step's transfers
// have completed (adding what arrived), wait() runs the remaining steps. Memory: one receive
// buffer the size of the largest segment this rank receives, lent by the communicator's
// RingBufferPool for as long as the reduction runs and kept there for the next one, so that a
// training step allocates nothing and the buffers stay resident only once (a freed 8 MB block stays
// in glibc's heap anyway, after its dynamic mmap threshold has grown; the libnbc collectives held
// message-sized temporaries). Point-to-point messages carry tags chosen from a per-communicator
// sequence number, so several reductions in flight on one communicator never match each other's
// messages; every member must start its reductions in the same order (collectives require it
// anyway).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "distributed/communicator.h"

namespace megatron {

// Receive buffers of the reductions in flight on one communicator; each goes back when its
// reduction completes, and is lent again to a later one that fits in it.
class RingBufferPool {
 public:
  Tensor take(DType dtype, int64_t numel);  // host, contiguous [numel]
  void give(const Tensor& buffer);

 private:
  std::vector<std::shared_ptr<Storage>> free_;
};

class RingReduction final : public CommRequest {
 public:
  // Reduces host tensor `buffer` (1-D, contiguous; f32, f64, i32 or i64) over `comm` with `op`.
  // segment_counts: size() entries summing to buffer.numel(). gather: all-reduce (every segment
  // ends reduced everywhere) instead of reduce-scatter (only this rank's). `sequence` numbers
  // this reduction among those started on `comm` (the same on every member).
  RingReduction(MPI_Comm comm, int rank, int size, Tensor buffer,
                const std::vector<int64_t>& segment_counts, ReduceOp op, bool gather,
                uint64_t sequence, std::shared_ptr<RingBufferPool> pool);
  ~RingReduction() override;

  void progress() override;
  void wait() override;

  // Runs once the reduction has completed (before wait() returns): a staged CUDA tensor's copy
  // back.
  void on_completion(std::function<void()> fn) { on_completion_ = std::move(fn); }

  // An all-reduce's segment counts: numel split into `size` near-equal parts (the first
  // numel % size one element longer).
  static std::vector<int64_t> even_segments(int64_t numel, int size);

 private:
  int steps() const;
  void post(int step);
  void finish_step(int step);  // after step's transfers completed
  Tensor segment(int index) const;

  void release();  // the receive buffer back to the pool

  MPI_Comm comm_;
  std::shared_ptr<RingBufferPool> pool_;
  int rank_, size_;
  Tensor buffer_, received_;
  std::vector<int64_t> offsets_;  // size + 1: segment j = [offsets_[j], offsets_[j + 1])
  ReduceOp op_;
  bool gather_;
  int tag_base_;
  int step_ = 0;  // the step whose transfers are posted (steps() when done)
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  bool done_ = false;
  std::function<void()> on_completion_;
};

}  // namespace megatron
