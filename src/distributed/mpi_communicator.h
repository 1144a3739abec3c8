// MpiCommunicator: Communicator over OpenMPI, for CPU tensors and (staged) CUDA tensors.
//
// Each instance owns its own MPI communicator (a duplicate of the one it was built from, or
// the result of split), freed on destruction, so library traffic never mixes with anyone
// else's. MPI errors are returned rather than fatal (MPI_ERRORS_RETURN) and rethrown as
// megatron::Error naming the operation; the CLI then aborts the whole job.
//
// bf16 and f16 are moved as 16-bit words; their SUM/MAX reductions are staged through f32
// (convert, reduce in f32, round once), which is what "sum in f32 semantics" means in the
// contract and is exact for MAX.
//
// CUDA tensors (CUDA build only) are staged through page-locked host memory: copy to the host
// on the compute stream, the MPI operation on host memory, copy back; the call returns when the
// result is in device memory. It is correct and slow (two PCIe copies and a host reduction per
// call), and it works wherever MPI does, including several ranks sharing one GPU, which NCCL
// refuses; that is what lets TP=2 run as two processes on one GPU in tests. A call stages at most
// kStagingPieceBytes at a time (one buffer per process, grown and reused, see
// distributed/cuda/pinned_staging.h), so large tensors move in pieces; the members of a call
// must therefore agree on whether its tensors are on the host or on a GPU (they do: one device
// kind per job); all_to_all_v stages its CUDA tensors whole (a host copy of each: its row counts
// differ per peer, so fixed pieces would not line up across ranks). For speed on GPUs use
// NcclCommunicator. The non-blocking reductions
// (iall_reduce, ireduce_scatter) are rings of point-to-point messages (ring_reduction.h: OpenMPI's
// own non-blocking reductions were 5x slower on one machine) and stage a CUDA tensor through a
// host copy of their own, made when the operation is posted and copied back by wait().
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "distributed/communicator.h"
#include "distributed/ring_reduction.h"

namespace megatron {

class MpiCommunicator final : public Communicator {
 public:
  // MPI counts are int, so all_reduce, broadcast, send and recv move tensors in pieces of at
  // most this many elements (the pieces are independent). all_gather/reduce_scatter blocks
  // must fit one int count.
  static constexpr int64_t kDefaultMaxChunkElements = int64_t(1) << 30;
  // What one staged call holds in host memory at a time (all its host buffers together).
  static constexpr int64_t kStagingPieceBytes = int64_t(64) << 20;

  // A communicator over the same processes as `comm` (which the caller keeps owning).
  // Groups made by split() inherit `max_chunk_elements` (tests make it small to exercise
  // the piecewise path on small tensors).
  static std::unique_ptr<MpiCommunicator> duplicate(
      MPI_Comm comm, int64_t max_chunk_elements = kDefaultMaxChunkElements);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  void all_gather(const Tensor& in, Tensor& out) override;
  void reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op = ReduceOp::SUM) override;
  void broadcast(Tensor& t, int root) override;
  void all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                    std::span<const int64_t> recv_rows) override;
  void send(const Tensor& t, int dst, int tag = 0) override;
  void recv(Tensor& t, int src, int tag = 0) override;
  std::unique_ptr<CommRequest> isend(const Tensor& t, int dst, int tag = 0) override;
  std::unique_ptr<CommRequest> irecv(Tensor& t, int src, int tag = 0) override;
  std::unique_ptr<CommRequest> iall_reduce(Tensor& t, ReduceOp op = ReduceOp::SUM) override;
  std::unique_ptr<CommRequest> ireduce_scatter(Tensor& t, std::span<const int64_t> counts,
                                               ReduceOp op = ReduceOp::SUM) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;

 private:
  MpiCommunicator(MPI_Comm owned, int64_t max_chunk_elements);  // takes ownership of `owned`
  template <typename Fn>
  void for_each_chunk(const Tensor& t, Fn&& fn) const;
  // Elements per piece of a staged call whose host buffers hold `slots` pieces at once; also
  // bounded by max_chunk_elements_ (so tests exercise the piecewise staging on small tensors).
  int64_t staged_piece_elements(DType dtype, int64_t slots) const;
  // Holds the page-locked staging buffer, room for `slots` pieces, for the whole call, and
  // calls fn(const StagedPiece&) for the consecutive pieces of n elements of `dtype`, each at
  // most staged_piece_elements(dtype, slots) long (CUDA builds only).
  template <typename Fn>
  void for_each_staged_piece(DType dtype, int64_t n, int64_t slots, Fn&& fn) const;
  // The same operations on CUDA tensors, through page-locked host memory.
  void staged_all_reduce(Tensor& t, ReduceOp op);
  void staged_all_gather(const Tensor& in, Tensor& out);
  void staged_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op);
  void staged_broadcast(Tensor& t, int root);
  void staged_all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows, Tensor& out,
                           std::span<const int64_t> recv_rows);
  void staged_send(const Tensor& t, int dst, int tag);
  void staged_recv(Tensor& t, int src, int tag);

  MPI_Comm comm_;
  // The non-blocking reductions' ring traffic (distributed/ring_reduction.h) on a communicator
  // of its own, so that its point-to-point messages never meet isend/irecv's; ring_sequence_
  // numbers the reductions started, which keeps two in flight apart.
  MPI_Comm ring_comm_ = MPI_COMM_NULL;
  uint64_t ring_sequence_ = 0;
  std::shared_ptr<RingBufferPool> ring_buffers_ = std::make_shared<RingBufferPool>();
  int64_t max_chunk_elements_;
  int rank_ = 0, size_ = 1;
};

}  // namespace megatron
