#include "distributed/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <string_view>
#include <vector>

#include "distributed/collective_checks.h"
#include "distributed/mpi_types.h"
#include "distributed/ring_reduction.h"
#ifdef MEGATRON_CUDA
#include "distributed/cuda/pinned_staging.h"
#endif

namespace megatron {

namespace {

bool is_half(DType t) {
  return t == DType::BF16 || t == DType::F16;
}

// Below this many elements a conversion is faster than waking OpenMP's threads.
constexpr int64_t kParallelConversion = int64_t(1) << 16;

// A contiguous f32 copy of a bf16/f16 tensor, and the rounding back (once, to nearest even).
Tensor widen_to_f32(const Tensor& t) {
  Tensor wide = Tensor::empty(t.shape(), DType::F32);
  float* dst = wide.data<float>();
  const int64_t n = t.numel();
  if (t.dtype() == DType::BF16) {
    const bf16* src = t.data<bf16>();
#pragma omp parallel for if (n > kParallelConversion)
    for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
  } else {
    const f16* src = t.data<f16>();
#pragma omp parallel for if (n > kParallelConversion)
    for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]);
  }
  return wide;
}

void narrow_from_f32(const Tensor& wide, Tensor& t) {
  const float* src = wide.data<float>();
  const int64_t n = t.numel();
  if (t.dtype() == DType::BF16) {
    bf16* dst = t.data<bf16>();
#pragma omp parallel for if (n > kParallelConversion)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16(src[i]);
  } else {
    f16* dst = t.data<f16>();
#pragma omp parallel for if (n > kParallelConversion)
    for (int64_t i = 0; i < n; ++i) dst[i] = f16(src[i]);
  }
}

// all_gather / reduce_scatter move one block per rank; each must fit an int count.
int block_count(const Tensor& chunk, const char* op) {
  MT_CHECK(chunk.numel() <= INT_MAX, op, ": per-rank block of ", chunk.numel(),
           " elements exceeds MPI's int count limit ", INT_MAX, "; split the tensor");
  return int(chunk.numel());
}

}  // namespace

std::unique_ptr<MpiCommunicator> MpiCommunicator::duplicate(MPI_Comm comm,
                                                            int64_t max_chunk_elements) {
  MT_CHECK(max_chunk_elements >= 1 && max_chunk_elements <= INT_MAX,
           "MpiCommunicator: max_chunk_elements must be in 1..", INT_MAX, ", got ",
           max_chunk_elements);
  MPI_Comm dup = MPI_COMM_NULL;
  mpi_check(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup");
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(dup, max_chunk_elements));
}

MpiCommunicator::MpiCommunicator(MPI_Comm owned, int64_t max_chunk_elements)
    : comm_(owned), max_chunk_elements_(max_chunk_elements) {
  // Errors come back as codes so they become megatron::Error (and then a clean job abort
  // with a message) instead of MPI's default abort without context.
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  mpi_check(MPI_Comm_dup(comm_, &ring_comm_), "MPI_Comm_dup");
  MPI_Comm_set_errhandler(ring_comm_, MPI_ERRORS_RETURN);
}

MpiCommunicator::~MpiCommunicator() {
  // A communicator that outlives MPI_Finalize (e.g. held in a static) must not be freed.
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && ring_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ring_comm_);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

// Calls fn(pointer, count) for consecutive pieces of t. An empty tensor makes no call: every
// member passes the same size, so all skip alike.
template <typename Fn>
void MpiCommunicator::for_each_chunk(const Tensor& t, Fn&& fn) const {
  char* base = static_cast<char*>(t.raw_data());
  const size_t element = dtype_size(t.dtype());
  const int64_t n = t.numel();
  for (int64_t start = 0; start < n; start += max_chunk_elements_) {
    fn(base + size_t(start) * element, int(std::min(max_chunk_elements_, n - start)));
  }
}

void MpiCommunicator::all_reduce(Tensor& t, ReduceOp op) {
  check_comm_tensor(t, "all_reduce", "tensor");
  if (!t.device().is_cpu()) return staged_all_reduce(t, op);
  if (is_half(t.dtype())) {
    Tensor wide = widen_to_f32(t);
    all_reduce(wide, op);
    narrow_from_f32(wide, t);
    return;
  }
  MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(t, [&](void* p, int count) {
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, p, count, type, mpi_op(op), comm_), "all_reduce");
  });
}

void MpiCommunicator::all_gather(const Tensor& in, Tensor& out) {
  check_comm_tensor(in, "all_gather", "input");
  check_comm_tensor(out, "all_gather", "output");
  check_chunked_dim0(in, "input", out, "output", size_, "all_gather");
  if (!in.device().is_cpu()) return staged_all_gather(in, out);
  const int count = block_count(in, "all_gather");
  MPI_Datatype type = mpi_type(in.dtype());
  // Megatron often gathers into a buffer whose own block already holds the input; MPI
  // forbids aliased send/receive buffers unless told with MPI_IN_PLACE.
  const char* own_block = static_cast<const char*>(out.raw_data()) + size_t(rank_) * in.nbytes();
  const void* send = in.raw_data() == own_block ? MPI_IN_PLACE : in.raw_data();
  mpi_check(MPI_Allgather(send, count, type, out.raw_data(), count, type, comm_), "all_gather");
}

void MpiCommunicator::reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  check_comm_tensor(in, "reduce_scatter", "input");
  check_comm_tensor(out, "reduce_scatter", "output");
  check_chunked_dim0(out, "output", in, "input", size_, "reduce_scatter");
  if (!in.device().is_cpu()) return staged_reduce_scatter(in, out, op);
  if (is_half(in.dtype())) {
    Tensor wide_in = widen_to_f32(in);
    Tensor wide_out = Tensor::empty(out.shape(), DType::F32);
    reduce_scatter(wide_in, wide_out, op);
    narrow_from_f32(wide_out, out);
    return;
  }
  const int count = block_count(out, "reduce_scatter");
  mpi_check(MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(), count, mpi_type(in.dtype()),
                                     mpi_op(op), comm_),
            "reduce_scatter");
}

void MpiCommunicator::broadcast(Tensor& t, int root) {
  check_comm_tensor(t, "broadcast", "tensor");
  check_peer_rank(root, size_, "broadcast", "root");
  if (!t.device().is_cpu()) return staged_broadcast(t, root);
  MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(t, [&](void* p, int count) {
    mpi_check(MPI_Bcast(p, count, type, root, comm_), "broadcast");
  });
}

namespace {

// MPI_Alltoallv's int counts and displacements, in elements, of `rows` rows of `row_elements`.
std::vector<int> element_counts(std::span<const int64_t> rows, int64_t row_elements,
                                std::vector<int>& displacements) {
  std::vector<int> counts;
  int64_t offset = 0;
  for (const int64_t r : rows) {
    const int64_t count = r * row_elements;
    MT_CHECK(offset + count <= INT_MAX, "all_to_all_v: ", offset + count,
             " elements exceed MPI's int count limit ", INT_MAX, "; exchange fewer rows at once");
    counts.push_back(int(count));
    displacements.push_back(int(offset));
    offset += count;
  }
  return counts;
}

}  // namespace

void MpiCommunicator::all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows,
                                   Tensor& out, std::span<const int64_t> recv_rows) {
  const int64_t row_elements = check_all_to_all_v(in, send_rows, out, recv_rows, size_);
  if (!in.device().is_cpu()) return staged_all_to_all_v(in, send_rows, out, recv_rows);
  std::vector<int> send_displacements, recv_displacements;
  const std::vector<int> send_counts = element_counts(send_rows, row_elements, send_displacements);
  const std::vector<int> recv_counts = element_counts(recv_rows, row_elements, recv_displacements);
  const MPI_Datatype type = mpi_type(in.dtype());
  mpi_check(
      MPI_Alltoallv(in.raw_data(), send_counts.data(), send_displacements.data(), type,
                    out.raw_data(), recv_counts.data(), recv_displacements.data(), type, comm_),
      "all_to_all_v");
}

void MpiCommunicator::send(const Tensor& t, int dst, int tag) {
  check_comm_tensor(t, "send", "tensor");
  check_peer_rank(dst, size_, "send", "destination");
  MT_CHECK(dst != rank_, "send: rank ", rank_, " cannot send to itself (blocking send)");
  if (!t.device().is_cpu()) return staged_send(t, dst, tag);
  MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(
      t, [&](void* p, int count) { mpi_check(MPI_Send(p, count, type, dst, tag, comm_), "send"); });
}

void MpiCommunicator::recv(Tensor& t, int src, int tag) {
  check_comm_tensor(t, "recv", "tensor");
  check_peer_rank(src, size_, "recv", "source");
  MT_CHECK(src != rank_, "recv: rank ", rank_, " cannot receive from itself (blocking recv)");
  if (!t.device().is_cpu()) return staged_recv(t, src, tag);
  MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(t, [&](void* p, int count) {
    MPI_Status status;
    mpi_check(MPI_Recv(p, count, type, src, tag, comm_, &status), "recv");
    int received = 0;
    MPI_Get_count(&status, type, &received);
    MT_CHECK(received == count, "recv: expected ", count, " elements of ", dtype_name(t.dtype()),
             " from rank ", src, " (tensor ", t.describe(), "), received ", received);
  });
}

namespace {

// The MPI requests of one isend or irecv (one per piece of at most max_chunk_elements). A CUDA
// tensor travels through a host copy the request owns: `host` is what MPI reads (isend) or
// writes (irecv), copied to `device_destination` once an irecv completes.
class MpiRequest final : public CommRequest {
 public:
  MpiRequest(const char* op, Tensor host, Tensor device_destination, int peer)
      : op_(op), host_(std::move(host)), device_(std::move(device_destination)), peer_(peer) {}
  ~MpiRequest() override {
    if (done_) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Waitall(int(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE);
  }

  void add(MPI_Request r, int count) {
    requests_.push_back(r);
    counts_.push_back(count);
  }
  void progress() override {
    if (done_ || completed_) return;
    statuses_.resize(requests_.size());
    int flag = 0;
    mpi_check(MPI_Testall(int(requests_.size()), requests_.data(), &flag, statuses_.data()), op_);
    completed_ = flag != 0;
  }

  void wait() override {
    if (done_) return;
    done_ = true;
    if (!completed_) {
      statuses_.resize(requests_.size());
      mpi_check(MPI_Waitall(int(requests_.size()), requests_.data(), statuses_.data()), op_);
    }
    if (std::string_view(op_) == "irecv") {
      const MPI_Datatype type = mpi_type(host_.dtype());
      for (size_t i = 0; i < statuses_.size(); ++i) {
        int received = 0;
        MPI_Get_count(&statuses_[i], type, &received);
        MT_CHECK(received == counts_[i], "irecv: expected ", counts_[i], " elements of ",
                 dtype_name(host_.dtype()), " from rank ", peer_, " (tensor ", host_.describe(),
                 "), received ", received);
      }
    }
    if (device_.defined()) device_.copy_from(host_);
  }

 private:
  const char* op_;
  Tensor host_, device_;
  int peer_;
  std::vector<MPI_Request> requests_;
  std::vector<int> counts_;
  std::vector<MPI_Status> statuses_;  // filled by the MPI_Testall / MPI_Waitall that completes
  bool completed_ = false;            // progress() saw every request complete
  bool done_ = false;
};

// A host copy of `t` (t itself when it is on the host).
Tensor on_host(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor host = Tensor::empty(t.shape(), t.dtype());
  host.copy_from(t);
  return host;
}

}  // namespace

std::unique_ptr<CommRequest> MpiCommunicator::isend(const Tensor& t, int dst, int tag) {
  check_comm_tensor(t, "isend", "tensor");
  check_peer_rank(dst, size_, "isend", "destination");
  MT_CHECK(dst != rank_, "isend: rank ", rank_, " cannot send to itself");
  Tensor host = on_host(t);
  auto request = std::make_unique<MpiRequest>("isend", host, Tensor(), dst);
  const MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(host, [&](void* p, int count) {
    MPI_Request r = MPI_REQUEST_NULL;
    mpi_check(MPI_Isend(p, count, type, dst, tag, comm_, &r), "isend");
    request->add(r, count);
  });
  return request;
}

std::unique_ptr<CommRequest> MpiCommunicator::irecv(Tensor& t, int src, int tag) {
  check_comm_tensor(t, "irecv", "tensor");
  check_peer_rank(src, size_, "irecv", "source");
  MT_CHECK(src != rank_, "irecv: rank ", rank_, " cannot receive from itself");
  const bool on_host = t.device().is_cpu();
  Tensor host = on_host ? t : Tensor::empty(t.shape(), t.dtype());
  auto request = std::make_unique<MpiRequest>("irecv", host, on_host ? Tensor() : t, src);
  const MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(host, [&](void* p, int count) {
    MPI_Request r = MPI_REQUEST_NULL;
    mpi_check(MPI_Irecv(p, count, type, src, tag, comm_, &r), "irecv");
    request->add(r, count);
  });
  return request;
}

std::unique_ptr<CommRequest> MpiCommunicator::iall_reduce(Tensor& t, ReduceOp op) {
  check_comm_tensor(t, "iall_reduce", "tensor");
  check_nonblocking_reduction(t, "iall_reduce");
  // A CUDA tensor is reduced in a host copy (of t's shape), copied back when the reduction
  // completes; the ring sees it flat.
  Tensor host = on_host(t);
  auto request = std::make_unique<RingReduction>(ring_comm_, rank_, size_, host.flatten(),
                                                 RingReduction::even_segments(t.numel(), size_), op,
                                                 /*gather=*/true, ring_sequence_++, ring_buffers_);
  if (!t.device().is_cpu()) request->on_completion([t, host]() mutable { t.copy_from(host); });
  return request;
}

std::unique_ptr<CommRequest> MpiCommunicator::ireduce_scatter(Tensor& t,
                                                              std::span<const int64_t> counts,
                                                              ReduceOp op) {
  check_comm_tensor(t, "ireduce_scatter", "tensor");
  check_nonblocking_reduction(t, "ireduce_scatter");
  check_scatter_counts(t, counts, size_, "ireduce_scatter");
  int64_t offset = 0;  // this rank's segment: [offset, offset + counts[rank])
  for (int r = 0; r < rank_; ++r) offset += counts[size_t(r)];
  const int64_t count = counts[size_t(rank_)];
  // The ring leaves this rank's sums in its segment, in place; a CUDA tensor's go from the
  // staged copy to the device segment.
  Tensor host = on_host(t);
  auto request = std::make_unique<RingReduction>(
      ring_comm_, rank_, size_, host, std::vector<int64_t>(counts.begin(), counts.end()), op,
      /*gather=*/false, ring_sequence_++, ring_buffers_);
  if (!t.device().is_cpu())
    request->on_completion(
        [segment = t.slice(0, offset, offset + count),
         staged = host.slice(0, offset, offset + count)]() mutable { segment.copy_from(staged); });
  return request;
}

void MpiCommunicator::barrier() {
  mpi_check(MPI_Barrier(comm_), "barrier");
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  check_split_color(color);
  MPI_Comm sub = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, color, key, &sub), "split");
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(sub, max_chunk_elements_));
}

// --- CUDA tensors, staged through page-locked host memory ---------------------------------
//
// Each piece: copy device -> host (on the compute stream, after the kernels that wrote the
// tensor), the host operation above on views of the staging buffer, copy host -> device. Every
// member computes the same pieces (same dtype, group size and chunk limit), so the pieces of
// one call match across ranks as MPI requires.

int64_t MpiCommunicator::staged_piece_elements(DType dtype, int64_t slots) const {
  const int64_t by_bytes = kStagingPieceBytes / (int64_t(dtype_size(dtype)) * slots);
  return std::max<int64_t>(1, std::min(by_bytes, max_chunk_elements_));
}

#ifdef MEGATRON_CUDA

namespace {

// One piece of a staged call: elements [start, start + len) of a block, at byte `offset` and
// `bytes` long; `host` the page-locked buffer (room for the call's slots of pieces).
struct StagedPiece {
  int64_t start, len;
  size_t offset, bytes;
  char* host;
};

}  // namespace

template <typename Fn>
void MpiCommunicator::for_each_staged_piece(DType dtype, int64_t n, int64_t slots, Fn&& fn) const {
  const size_t element = dtype_size(dtype);
  const int64_t piece = staged_piece_elements(dtype, slots);
  cuda::PinnedStaging& staging = cuda::PinnedStaging::instance();
  auto lock = staging.lock();
  char* host =
      static_cast<char*>(staging.reserve(size_t(std::min(piece, n)) * element * size_t(slots)));
  for (int64_t start = 0; start < n; start += piece) {
    const int64_t len = std::min(piece, n - start);
    fn(StagedPiece{start, len, size_t(start) * element, size_t(len) * element, host});
  }
}

void MpiCommunicator::staged_all_reduce(Tensor& t, ReduceOp op) {
  char* device = static_cast<char*>(t.raw_data());
  for_each_staged_piece(t.dtype(), t.numel(), 1, [&](const StagedPiece& p) {
    cuda::copy_rows(p.host, p.bytes, device + p.offset, p.bytes, p.bytes, 1);
    Tensor staged = Tensor::from_blob(p.host, {p.len}, t.dtype());
    all_reduce(staged, op);
    cuda::copy_rows(device + p.offset, p.bytes, p.host, p.bytes, p.bytes, 1);
  });
}

// Piece [start, start+len) of every rank's block: the host input holds this rank's piece, the
// host output the n gathered pieces back to back, copied to their n places in `out` as n rows
// one block apart.
void MpiCommunicator::staged_all_gather(const Tensor& in, Tensor& out) {
  const DType dtype = in.dtype();
  const size_t block_bytes = size_t(in.numel()) * dtype_size(dtype);
  const char* device_in = static_cast<const char*>(in.raw_data());
  char* device_out = static_cast<char*>(out.raw_data());
  for_each_staged_piece(dtype, in.numel(), size_ + 1, [&](const StagedPiece& p) {
    char* host_in = p.host;
    char* host_out = p.host + p.bytes;
    // Read before any write: when `in` is this rank's own block of `out`, piece `start` of it
    // is overwritten only with the same values, and later pieces are untouched so far.
    cuda::copy_rows(host_in, p.bytes, device_in + p.offset, p.bytes, p.bytes, 1);
    Tensor staged_in = Tensor::from_blob(host_in, {p.len}, dtype);
    Tensor staged_out = Tensor::from_blob(host_out, {p.len * size_}, dtype);
    all_gather(staged_in, staged_out);
    cuda::copy_rows(device_out + p.offset, block_bytes, host_out, p.bytes, p.bytes, size_t(size_));
  });
}

void MpiCommunicator::staged_reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) {
  const DType dtype = in.dtype();
  const size_t block_bytes = size_t(out.numel()) * dtype_size(dtype);
  const char* device_in = static_cast<const char*>(in.raw_data());
  char* device_out = static_cast<char*>(out.raw_data());
  for_each_staged_piece(dtype, out.numel(), size_ + 1, [&](const StagedPiece& p) {
    char* host_in = p.host;
    char* host_out = p.host + p.bytes * size_t(size_);
    cuda::copy_rows(host_in, p.bytes, device_in + p.offset, block_bytes, p.bytes, size_t(size_));
    Tensor staged_in = Tensor::from_blob(host_in, {p.len * size_}, dtype);
    Tensor staged_out = Tensor::from_blob(host_out, {p.len}, dtype);
    reduce_scatter(staged_in, staged_out, op);
    cuda::copy_rows(device_out + p.offset, p.bytes, host_out, p.bytes, p.bytes, 1);
  });
}

void MpiCommunicator::staged_broadcast(Tensor& t, int root) {
  char* device = static_cast<char*>(t.raw_data());
  for_each_staged_piece(t.dtype(), t.numel(), 1, [&](const StagedPiece& p) {
    if (rank_ == root) cuda::copy_rows(p.host, p.bytes, device + p.offset, p.bytes, p.bytes, 1);
    Tensor staged = Tensor::from_blob(p.host, {p.len}, t.dtype());
    broadcast(staged, root);
    if (rank_ != root) cuda::copy_rows(device + p.offset, p.bytes, p.host, p.bytes, p.bytes, 1);
  });
}

void MpiCommunicator::staged_all_to_all_v(const Tensor& in, std::span<const int64_t> send_rows,
                                          Tensor& out, std::span<const int64_t> recv_rows) {
  Tensor host_in = Tensor::empty(in.shape(), in.dtype());
  host_in.copy_from(in);
  Tensor host_out = Tensor::empty(out.shape(), out.dtype());
  all_to_all_v(host_in, send_rows, host_out, recv_rows);
  out.copy_from(host_out);
}

void MpiCommunicator::staged_send(const Tensor& t, int dst, int tag) {
  const char* device = static_cast<const char*>(t.raw_data());
  for_each_staged_piece(t.dtype(), t.numel(), 1, [&](const StagedPiece& p) {
    cuda::copy_rows(p.host, p.bytes, device + p.offset, p.bytes, p.bytes, 1);
    send(Tensor::from_blob(p.host, {p.len}, t.dtype()), dst, tag);
  });
}

void MpiCommunicator::staged_recv(Tensor& t, int src, int tag) {
  char* device = static_cast<char*>(t.raw_data());
  for_each_staged_piece(t.dtype(), t.numel(), 1, [&](const StagedPiece& p) {
    Tensor staged = Tensor::from_blob(p.host, {p.len}, t.dtype());
    recv(staged, src, tag);
    cuda::copy_rows(device + p.offset, p.bytes, p.host, p.bytes, p.bytes, 1);
  });
}

#else  // no CUDA: a device tensor can only come from from_blob, and nothing can copy it

namespace {
[[noreturn]] void no_staging(const char* op, const Tensor& t) {
  MT_THROW(op, ": a tensor on ", t.device().str(),
           " needs a binary built with CUDA (cmake -DMEGATRON_CUDA=ON); this build moves CPU "
           "tensors only");
}
}  // namespace

void MpiCommunicator::staged_all_reduce(Tensor& t, ReduceOp) {
  no_staging("all_reduce", t);
}
void MpiCommunicator::staged_all_gather(const Tensor& in, Tensor&) {
  no_staging("all_gather", in);
}
void MpiCommunicator::staged_reduce_scatter(const Tensor& in, Tensor&, ReduceOp) {
  no_staging("reduce_scatter", in);
}
void MpiCommunicator::staged_broadcast(Tensor& t, int) {
  no_staging("broadcast", t);
}
void MpiCommunicator::staged_all_to_all_v(const Tensor& in, std::span<const int64_t>, Tensor&,
                                          std::span<const int64_t>) {
  no_staging("all_to_all_v", in);
}
void MpiCommunicator::staged_send(const Tensor& t, int, int) {
  no_staging("send", t);
}
void MpiCommunicator::staged_recv(Tensor& t, int, int) {
  no_staging("recv", t);
}

#endif

}  // namespace megatron
