// NcclCommunicator: Communicator over NCCL for CUDA tensors, with an MPI twin for host tensors.
// Built only with MEGATRON_CUDA.
//
// Bootstrap: rank 0 of the host communicator (an MpiCommunicator, or a SoloCommunicator for a
// world of one) makes an ncclUniqueId and broadcasts it over that communicator; every member then
// joins with ncclCommInitRank on its GPU (use_device is called for it). split(color, key) is
// ncclCommSplit, with the host twin split the same way, so every NCCL group keeps an MPI group
// over the same members in the same order (checked).
//
// Which transport carries a call: CUDA tensors go through NCCL; CPU tensors (a logged scalar,
// all_reduce_scalar, a flag) go through the host twin, with MpiCommunicator's semantics. A CUDA
// tensor must be on this communicator's GPU.
//
// Streams: every NCCL operation is queued on the communication stream after
// cuda::communication_begins() (it waits for the compute work queued so far; a deferred
// isend/irecv waits for the compute work queued before it was called, below) and followed by
// cuda::communication_ends() (the compute stream waits for it, also when queuing it failed). The
// host returns once the operation is queued: to the caller it is ordered on the compute stream
// like a kernel, so later kernels, copies to the host and reuse of freed memory all see its
// result. barrier() also waits for this rank's queued GPU work, then synchronizes the hosts.
//
// Differences from MpiCommunicator:
// - bf16/f16 SUM: NCCL reduces 16-bit values natively, rounding to bf16/f16 after each partial
//   sum of its reduction tree, so a sum may differ from MpiCommunicator's (f32 accumulation,
//   rounded once) in the last bit(s), and may depend on the number of ranks and NCCL's algorithm.
//   MAX is exact on both. The trainer reduces gradients in f32, where both agree up to the order
//   of the additions.
// - send/recv: NCCL has no tags (the argument is ignored; messages between two ranks arrive in
//   the order they were sent) and cannot report a size mismatch: the receiver must pass a tensor
//   of the sender's size and dtype.
// - isend/irecv of CUDA tensors are deferred: they queue nothing until a wait() on any of them,
//   or any other operation of this communicator on CUDA tensors (and barrier()), which first
//   posts every deferred operation in one ncclGroupStart/ncclGroupEnd (NCCL's way to have sends
//   and receives progress together, as batch_isend_irecv does), so messages between two ranks
//   keep the order they were posted in. Each transfer waits for the compute work queued before
//   its isend/irecv (an event recorded then), not for the work queued up to the wait, and is
//   ordered before the compute work queued after the wait like every NCCL call here. Compute
//   work queued between an irecv and its wait() must not touch the tensor.
// - iall_reduce / ireduce_scatter of CUDA tensors go on the overlap stream (core/cuda/
//   cuda_context.h: after the compute work queued so far, beside the blocking collectives); wait()
//   makes the compute stream wait for them. ireduce_scatter with equal counts (the usual case) is
//   one in-place ncclReduceScatter; with unequal counts it is one NCCL group of ncclReduce calls,
//   one per rank with a non-empty segment (NCCL has no reduce-scatter with counts).
// - Sizes: counts are size_t, so no piecewise transfers are needed.
// - NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected"); several
//   ranks per GPU (tests) use MpiCommunicator, which stages CUDA tensors through host memory.
//
// Errors name the NCCL call, ncclGetErrorString and ncclGetLastError's detail.
#pragma once

#include <memory>
#include <vector>

#include "core/device.h"
#include "distributed/communicator.h"

struct ncclComm;    // nccl.h's ncclComm_t is `struct ncclComm*`
struct CUevent_st;  // cuda_runtime.h's cudaEvent_t is `struct CUevent_st*`

namespace megatron {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host`'s members (every member calls it): binds this process to `device`
  // and joins an NCCL communicator over the same members, ranks as in `host`, which becomes
  // the twin (owned).
  static std::unique_ptr<NcclCommunicator> create(std::unique_ptr<Communicator> host,
                                                  Device device);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  Device device() const { return device_; }
  Communicator& host() { return *host_; }  // the MPI twin that carries CPU tensors

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
  NcclCommunicator(ncclComm* comm, std::unique_ptr<Communicator> host, Device device);
  void check_on_device(const Tensor& t, const char* op, const char* what) const;
  friend class NcclRequest;
  // Posts the deferred isend/irecv operations as one NCCL group.
  void post_deferred();
  struct Deferred {
    bool send;
    Tensor tensor;
    int peer;
    CUevent_st* queued;  // the compute work queued before the call (cuda::compute_point)
  };
  std::vector<Deferred> deferred_;

  ncclComm* comm_;
  std::unique_ptr<Communicator> host_;
  Device device_;
};

}  // namespace megatron
