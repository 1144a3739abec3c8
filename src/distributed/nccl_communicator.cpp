#include "distributed/nccl_communicator.h"

#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "core/cuda/cuda_context.h"
#include "core/device_runtime.h"
#include "distributed/collective_checks.h"

namespace megatron {

namespace {

void nccl_check(ncclResult_t result, const char* call, ncclComm_t comm) {
  if (result == ncclSuccess) [[likely]]
    return;
  const char* detail = ncclGetLastError(comm);
  MT_THROW("NCCL call ", call, " failed: ", ncclGetErrorString(result),
           (detail != nullptr && *detail != '\0') ? std::string(": ") + detail : std::string());
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32:
      return ncclFloat32;
    case DType::F64:
      return ncclFloat64;
    case DType::BF16:
      return ncclBfloat16;
    case DType::F16:
      return ncclFloat16;
    case DType::I32:
      return ncclInt32;
    case DType::I64:
      return ncclInt64;
    case DType::U8:
      return ncclUint8;
  }
  MT_THROW("no NCCL type for dtype ", dtype_name(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  return op == ReduceOp::SUM ? ncclSum : ncclMax;
}

// An open NCCL group, closed by end() or, when an exception leaves the scope first, by the
// destructor: a group left open would hold back every later NCCL call of this thread.
class NcclGroup {
 public:
  explicit NcclGroup(ncclComm_t comm) : comm_(comm) {
    nccl_check(ncclGroupStart(), "ncclGroupStart", comm_);
  }
  ~NcclGroup() {
    if (open_) (void)ncclGroupEnd();  // unwinding: the error in flight is the one to report
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  void end() {
    open_ = false;
    nccl_check(ncclGroupEnd(), "ncclGroupEnd", comm_);
  }

 private:
  ncclComm_t comm_;
  bool open_ = true;
};

// Queues fn(stream) on the communication stream, which the caller has made wait for the compute
// work fn depends on, and orders the compute work queued afterwards after it. Also when fn
// throws: it may have queued part of its work, which must not race the compute stream.
template <typename Fn>
void queue_communication(Fn&& fn) {
  try {
    fn(cuda::communication_stream());
  } catch (...) {
    try {
      cuda::communication_ends();
    } catch (...) {  // the error in flight is the one to report
    }
    throw;
  }
  cuda::communication_ends();
}

// Queues fn(stream) on the communication stream, ordered after the compute work queued so far
// and before the compute work queued after.
template <typename Fn>
void on_communication_stream(Fn&& fn) {
  cuda::communication_begins();
  queue_communication(std::forward<Fn>(fn));
}

// A non-blocking collective queued on the overlap stream: waiting makes the compute stream wait
// for it (the host does not block). Destroyed unwaited, it waits, as the contract asks.
class NcclOverlapRequest final : public CommRequest {
 public:
  explicit NcclOverlapRequest(cudaEvent_t done) : done_(done) {}
  ~NcclOverlapRequest() override {
    try {
      wait();
    } catch (...) {  // destructors must not throw
    }
  }
  void wait() override {
    if (done_ == nullptr) return;
    cudaEvent_t done = done_;
    done_ = nullptr;
    cuda::compute_waits(done);
  }
  void progress() override {}  // NCCL progresses on the GPU by itself

 private:
  cudaEvent_t done_;
};

// Queues fn(stream) on the overlap stream after the compute work queued so far; the request
// orders the compute work queued after its wait(). When fn throws, the compute stream waits for
// the overlap stream at once: fn may have queued part of its work.
template <typename Fn>
std::unique_ptr<CommRequest> on_overlap_stream(Fn&& fn) {
  cuda::overlap_begins();
  try {
    fn(cuda::overlap_stream());
  } catch (...) {
    try {
      cuda::compute_waits(cuda::overlap_ends());
    } catch (...) {  // the error in flight is the one to report
    }
    throw;
  }
  return std::make_unique<NcclOverlapRequest>(cuda::overlap_ends());
}

}  // namespace

std::unique_ptr<NcclCommunicator> NcclCommunicator::create(std::unique_ptr<Communicator> host,
                                                           Device device) {
  MT_CHECK(host != nullptr, "NcclCommunicator: no host communicator to bootstrap over");
  MT_CHECK(device.is_cuda(), "NcclCommunicator: NCCL moves CUDA tensors, but this process runs on ",
           device.str(), "; use --distributed-backend mpi on the CPU");
  use_device(device);

  // Rank 0 makes the id; a failure there is broadcast with it (first byte), so that every rank
  // throws instead of waiting for an id that never comes.
  struct {
    uint8_t ok = 0;
    ncclUniqueId id{};
  } message;
  std::string failure;
  if (host->rank() == 0) {
    const ncclResult_t r = ncclGetUniqueId(&message.id);
    message.ok = r == ncclSuccess;
    if (r != ncclSuccess) failure = ncclGetErrorString(r);
  }
  Tensor bytes = Tensor::from_blob(&message, {int64_t(sizeof message)}, DType::U8);
  host->broadcast(bytes, 0);
  MT_CHECK(message.ok, "NCCL call ncclGetUniqueId failed on rank 0",
           failure.empty() ? std::string() : ": " + failure);

  ncclComm_t comm = nullptr;
  const ncclResult_t init = ncclCommInitRank(&comm, host->size(), message.id, host->rank());
  std::string init_failure;
  if (init != ncclSuccess) {
    const char* detail = ncclGetLastError(comm);
    init_failure = std::string(ncclGetErrorString(init)) +
                   (detail != nullptr && *detail != '\0' ? std::string(": ") + detail : "");
  }
  // Every rank learns whether every rank joined, so none is left using a half-made group.
  const double failed_ranks = host->all_reduce_scalar(init == ncclSuccess ? 0.0 : 1.0);
  if (failed_ranks > 0) {
    // Abort, not destroy: local, it does not wait for peers that may never join.
    if (comm != nullptr) (void)ncclCommAbort(comm);
    MT_CHECK(init_failure.empty(), "NCCL call ncclCommInitRank failed on rank ", host->rank(), " (",
             device.str(), "): ", init_failure,
             "; NCCL needs one GPU per rank (for several ranks per GPU use "
             "--distributed-backend mpi)");
    MT_THROW("NCCL communicator setup failed on ", int(failed_ranks), " other rank(s) of ",
             host->size(), "; see their messages");
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, std::move(host), device));
}

NcclCommunicator::NcclCommunicator(ncclComm* comm, std::unique_ptr<Communicator> host,
                                   Device device)
    : comm_(comm), host_(std::move(host)), device_(device) {}

NcclCommunicator::~NcclCommunicator() {
  // Waits for this communicator's queued operations, then frees it. Errors cannot be reported
  // from a destructor; a failed job aborts through abort_job before it gets here.
  if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
}

void NcclCommunicator::check_on_device(const Tensor& t, const char* op, const char* what) const {
  MT_CHECK(t.device() == device_, op, ": ", what, " is on ", t.device().str(),
           ", but this NCCL communicator moves tensors of ", device_.str());
}

void NcclCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  check_comm_tensor(t, "all_reduce", "tensor");
  if (t.device().is_cpu()) return host_->all_reduce(t, op);
  check_on_device(t, "all_reduce", "tensor");
  post_deferred();
  if (t.numel() == 0) return;
  on_communication_stream([&](cudaStream_t stream) {
    nccl_check(ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()),
                             nccl_op(op), comm_, stream),
               "ncclAllReduce", comm_);
  });
}

void NcclCommunicator::all_gather(const Tensor& in, Tensor& out) {
  check_comm_tensor(in, "all_gather", "input");
  check_comm_tensor(out, "all_gather", "output");
  check_chunked_dim0(in, "input", out, "output", size(), "all_gather");
  if (in.device().is_cpu()) return host_->all_gather(in, out);
  check_on_device(in, "all_gather", "input");
  post_deferred();
  if (in.numel() == 0) return;
  // An input that is this rank's own block of the output is NCCL's in-place all-gather.
  on_communication_stream([&](cudaStream_t stream) {
    nccl_check(ncclAllGather(in.raw_data(), out.raw_data(), size_t(in.numel()),
                             nccl_type(in.dtype()), comm_, stream),
               "ncclAllGather", comm_);
  });
}

void NcclCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  check_comm_tensor(in, "reduce_scatter", "input");
  check_comm_tensor(out, "reduce_scatter", "output");
  check_chunked_dim0(out, "output", in, "input", size(), "reduce_scatter");
  if (in.device().is_cpu()) return host_->reduce_scatter(in, out, op);
  check_on_device(in, "reduce_scatter", "input");
  post_deferred();
  if (out.numel() == 0) return;
  on_communication_stream([&](cudaStream_t stream) {
    nccl_check(ncclReduceScatter(in.raw_data(), out.raw_data(), size_t(out.numel()),
                                 nccl_type(in.dtype()), nccl_op(op), comm_, stream),
               "ncclReduceScatter", comm_);
  });
}

void NcclCommunicator::broadcast(Tensor& t, int root) {
  check_comm_tensor(t, "broadcast", "tensor");
  check_peer_rank(root, size(), "broadcast", "root");
  if (t.device().is_cpu()) return host_->broadcast(t, root);
  check_on_device(t, "broadcast", "tensor");
  post_deferred();
  if (t.numel() == 0) return;
  on_communication_stream([&](cudaStream_t stream) {
    nccl_check(ncclBroadcast(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()),
                             root, comm_, stream),
               "ncclBroadcast", comm_);
  });
}

void NcclCommunicator::all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows,
                                    Tensor& out, std::span<const int64_t> recv_rows) {
  const size_t row_elements = size_t(check_all_to_all_v(in, send_rows, out, recv_rows, size()));
  if (in.device().is_cpu()) return host_->all_to_all_v(in, send_rows, out, recv_rows);
  check_on_device(in, "all_to_all_v", "input");
  post_deferred();
  const size_t row_bytes = row_elements * dtype_size(in.dtype());
  const ncclDataType_t type = nccl_type(in.dtype());
  // NCCL has no all-to-all: one group of a send and a receive per peer (itself included), which
  // NCCL runs as one operation. Empty blocks post nothing, on both sides alike (the counts
  // agree).
  on_communication_stream([&](cudaStream_t stream) {
    NcclGroup group(comm_);
    const char* send = static_cast<const char*>(in.raw_data());
    char* recv = static_cast<char*>(out.raw_data());
    for (int peer = 0; peer < size(); ++peer) {
      const size_t sent = size_t(send_rows[size_t(peer)]),
                   received = size_t(recv_rows[size_t(peer)]);
      if (sent > 0)
        nccl_check(ncclSend(send, sent * row_elements, type, peer, comm_, stream), "ncclSend",
                   comm_);
      if (received > 0)
        nccl_check(ncclRecv(recv, received * row_elements, type, peer, comm_, stream), "ncclRecv",
                   comm_);
      send += sent * row_bytes;
      recv += received * row_bytes;
    }
    group.end();
  });
}

void NcclCommunicator::send(const Tensor& t, int dst, int tag) {
  check_comm_tensor(t, "send", "tensor");
  check_peer_rank(dst, size(), "send", "destination");
  MT_CHECK(dst != rank(), "send: rank ", rank(), " cannot send to itself (blocking send)");
  if (t.device().is_cpu()) return host_->send(t, dst, tag);
  check_on_device(t, "send", "tensor");
  post_deferred();
  if (t.numel() == 0) return;
  on_communication_stream([&](cudaStream_t stream) {
    nccl_check(ncclSend(t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), dst, comm_, stream),
               "ncclSend", comm_);
  });
}

void NcclCommunicator::recv(Tensor& t, int src, int tag) {
  check_comm_tensor(t, "recv", "tensor");
  check_peer_rank(src, size(), "recv", "source");
  MT_CHECK(src != rank(), "recv: rank ", rank(), " cannot receive from itself (blocking recv)");
  if (t.device().is_cpu()) return host_->recv(t, src, tag);
  check_on_device(t, "recv", "tensor");
  post_deferred();
  if (t.numel() == 0) return;
  on_communication_stream([&](cudaStream_t stream) {
    nccl_check(ncclRecv(t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()), src, comm_, stream),
               "ncclRecv", comm_);
  });
}

// A deferred isend/irecv: waiting posts the communicator's deferred group (nccl_communicator.h).
class NcclRequest final : public CommRequest {
 public:
  explicit NcclRequest(NcclCommunicator* comm) : comm_(comm) {}
  ~NcclRequest() override {
    try {
      wait();
    } catch (...) {  // destructors must not throw; the next wait() reports the failure
    }
  }
  void wait() override {
    if (comm_ == nullptr) return;
    NcclCommunicator* comm = comm_;
    comm_ = nullptr;
    comm->post_deferred();
  }
  void progress() override {}  // deferred: posted by a wait()

 private:
  NcclCommunicator* comm_;
};

void NcclCommunicator::post_deferred() {
  if (deferred_.empty()) return;
  std::vector<Deferred> ops = std::move(deferred_);
  deferred_.clear();
  // Each transfer waits for the compute work queued before its isend/irecv only, not for the
  // work queued since (communication_begins would wait for all of it).
  for (const Deferred& d : ops) cuda::communication_waits(d.queued);
  queue_communication([&](cudaStream_t stream) {
    NcclGroup group(comm_);
    for (const Deferred& d : ops) {
      void* p = d.tensor.raw_data();
      const size_t n = size_t(d.tensor.numel());
      if (d.send)
        nccl_check(ncclSend(p, n, nccl_type(d.tensor.dtype()), d.peer, comm_, stream), "ncclSend",
                   comm_);
      else
        nccl_check(ncclRecv(p, n, nccl_type(d.tensor.dtype()), d.peer, comm_, stream), "ncclRecv",
                   comm_);
    }
    group.end();
  });
}

std::unique_ptr<CommRequest> NcclCommunicator::isend(const Tensor& t, int dst, int tag) {
  check_comm_tensor(t, "isend", "tensor");
  check_peer_rank(dst, size(), "isend", "destination");
  MT_CHECK(dst != rank(), "isend: rank ", rank(), " cannot send to itself");
  if (t.device().is_cpu()) return host_->isend(t, dst, tag);
  check_on_device(t, "isend", "tensor");
  if (t.numel() > 0) deferred_.push_back({true, t, dst, cuda::compute_point()});
  return std::make_unique<NcclRequest>(this);
}

std::unique_ptr<CommRequest> NcclCommunicator::irecv(Tensor& t, int src, int tag) {
  check_comm_tensor(t, "irecv", "tensor");
  check_peer_rank(src, size(), "irecv", "source");
  MT_CHECK(src != rank(), "irecv: rank ", rank(), " cannot receive from itself");
  if (t.device().is_cpu()) return host_->irecv(t, src, tag);
  check_on_device(t, "irecv", "tensor");
  if (t.numel() > 0) deferred_.push_back({false, t, src, cuda::compute_point()});
  return std::make_unique<NcclRequest>(this);
}

std::unique_ptr<CommRequest> NcclCommunicator::iall_reduce(Tensor& t, ReduceOp op) {
  check_comm_tensor(t, "iall_reduce", "tensor");
  if (t.device().is_cpu()) return host_->iall_reduce(t, op);
  check_on_device(t, "iall_reduce", "tensor");
  check_nonblocking_reduction(t, "iall_reduce");
  post_deferred();
  return on_overlap_stream([&](cudaStream_t stream) {
    if (t.numel() == 0) return;
    nccl_check(ncclAllReduce(t.raw_data(), t.raw_data(), size_t(t.numel()), nccl_type(t.dtype()),
                             nccl_op(op), comm_, stream),
               "ncclAllReduce", comm_);
  });
}

std::unique_ptr<CommRequest> NcclCommunicator::ireduce_scatter(Tensor& t,
                                                               std::span<const int64_t> counts,
                                                               ReduceOp op) {
  check_comm_tensor(t, "ireduce_scatter", "tensor");
  if (t.device().is_cpu()) return host_->ireduce_scatter(t, counts, op);
  check_on_device(t, "ireduce_scatter", "tensor");
  check_nonblocking_reduction(t, "ireduce_scatter");
  check_scatter_counts(t, counts, size(), "ireduce_scatter");
  post_deferred();
  const size_t element = dtype_size(t.dtype());
  const bool equal_counts =
      std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  return on_overlap_stream([&](cudaStream_t stream) {
    char* base = static_cast<char*>(t.raw_data());
    if (equal_counts) {
      const size_t count = size_t(counts[0]);
      if (count == 0) return;
      // recvbuff = this rank's block of sendbuff: NCCL's in-place reduce-scatter.
      nccl_check(ncclReduceScatter(base, base + size_t(rank()) * count * element, count,
                                   nccl_type(t.dtype()), nccl_op(op), comm_, stream),
                 "ncclReduceScatter", comm_);
      return;
    }
    NcclGroup group(comm_);
    char* segment = base;
    for (int r = 0; r < size(); ++r) {
      const size_t count = size_t(counts[size_t(r)]);
      // Segment r reduced onto rank r, in place (recvbuff == sendbuff; NCCL writes it on the
      // root only).
      if (count > 0)
        nccl_check(ncclReduce(segment, segment, count, nccl_type(t.dtype()), nccl_op(op), r, comm_,
                              stream),
                   "ncclReduce", comm_);
      segment += count * element;
    }
    group.end();
  });
}

void NcclCommunicator::barrier() {
  post_deferred();
  cuda::synchronize_compute();  // this rank's kernels and collectives so far are done
  host_->barrier();
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  check_split_color(color);
  std::unique_ptr<Communicator> host = host_->split(color, key);
  ncclComm_t sub = nullptr;
  // config nullptr: the new communicator inherits this one's configuration.
  nccl_check(ncclCommSplit(comm_, color, key, &sub, nullptr), "ncclCommSplit", comm_);
  int nccl_rank = -1, nccl_size = 0;
  nccl_check(ncclCommUserRank(sub, &nccl_rank), "ncclCommUserRank", sub);
  nccl_check(ncclCommCount(sub, &nccl_size), "ncclCommCount", sub);
  if (nccl_rank != host->rank() || nccl_size != host->size()) {
    (void)ncclCommAbort(sub);
    MT_THROW("split(", color, ", ", key, "): NCCL made rank ", nccl_rank, " of ", nccl_size,
             " but MPI rank ", host->rank(), " of ", host->size(),
             "; the two transports must order a group's members alike");
  }
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(sub, std::move(host), device_));
}

}  // namespace megatron
