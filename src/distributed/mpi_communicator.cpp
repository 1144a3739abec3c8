#include "distributed/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string_view>
#include <vector>

#include "distributed/collective_checks.h"
#ifdef MEGATRON_CUDA
#include "distributed/cuda/pinned_staging.h"
#endif

namespace megatron {

namespace {

void mpi_check(int code, const char* op) {
  if (code == MPI_SUCCESS) [[likely]]
    return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  MT_THROW(op, ": MPI error ", code, ": ", std::string(text, length));
}

// bf16/f16 travel as 16-bit words; they are only reduced after staging through f32.
MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::F32:
      return MPI_FLOAT;
    case DType::F64:
      return MPI_DOUBLE;
    case DType::BF16:
    case DType::F16:
      return MPI_UINT16_T;
    case DType::I32:
      return MPI_INT32_T;
    case DType::I64:
      return MPI_INT64_T;
    case DType::U8:
      return MPI_UINT8_T;
  }
  MT_THROW("no MPI type for dtype ", dtype_name(t));
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::SUM ? MPI_SUM : MPI_MAX;
}

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
}

MpiCommunicator::~MpiCommunicator() {
  // A communicator that outlives MPI_Finalize (e.g. held in a static) must not be freed.
  int finalized = 0;
  MPI_Finalized(&finalized);
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

// The MPI requests of one non-blocking operation (one per piece of at most max_chunk_elements).
// A CUDA tensor travels through host copies the request owns: `host` is what MPI writes (or,
// for an isend, reads), copied to `device_destination` once the operation completes; `keep`
// holds what else MPI reads until then (a staged input, a collective's counts).
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

  const Tensor& host() const { return host_; }
  void add(MPI_Request r, int count) {
    requests_.push_back(r);
    counts_.push_back(count);
  }
  void keep(Tensor staged_input) { staged_input_ = std::move(staged_input); }
  // The counts of a collective, alive until it completes (MPI may read them until then).
  const int* keep(std::vector<int> counts) {
    collective_counts_ = std::move(counts);
    return collective_counts_.data();
  }
  // Once complete, `bytes` move from `from` to `to` (they may overlap): an in-place
  // reduce-scatter's result, which MPI leaves at the start of the buffer.
  void move_on_completion(const void* from, void* to, size_t bytes) {
    move_from_ = from;
    move_to_ = to;
    move_bytes_ = bytes;
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
    if (move_bytes_ > 0 && move_from_ != move_to_) std::memmove(move_to_, move_from_, move_bytes_);
    if (device_.defined()) device_.copy_from(host_);
  }

 private:
  const char* op_;
  Tensor host_, device_, staged_input_;
  int peer_;
  std::vector<MPI_Request> requests_;
  std::vector<int> counts_, collective_counts_;
  std::vector<MPI_Status> statuses_;  // filled by the MPI_Testall / MPI_Waitall that completes
  bool completed_ = false;            // progress() saw every request complete
  bool done_ = false;
  const void* move_from_ = nullptr;
  void* move_to_ = nullptr;
  size_t move_bytes_ = 0;
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
  // A CUDA tensor is reduced in a host copy, copied back when the request completes.
  const bool host_tensor = t.device().is_cpu();
  Tensor host = on_host(t);
  auto request =
      std::make_unique<MpiRequest>("iall_reduce", host, host_tensor ? Tensor() : t, rank_);
  const MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(host, [&](void* p, int count) {
    MPI_Request r = MPI_REQUEST_NULL;
    mpi_check(MPI_Iallreduce(MPI_IN_PLACE, p, count, type, mpi_op(op), comm_, &r), "iall_reduce");
    request->add(r, count);
  });
  return request;
}

std::unique_ptr<CommRequest> MpiCommunicator::ireduce_scatter(Tensor& t,
                                                              std::span<const int64_t> counts,
                                                              ReduceOp op) {
  check_comm_tensor(t, "ireduce_scatter", "tensor");
  check_nonblocking_reduction(t, "ireduce_scatter");
  check_scatter_counts(t, counts, size_, "ireduce_scatter");
  std::vector<int> int_counts;
  int64_t offset = 0;  // this rank's segment: [offset, offset + counts[rank])
  for (int r = 0; r < size_; ++r) {
    const int64_t c = counts[size_t(r)];
    MT_CHECK(c <= INT_MAX, "ireduce_scatter: a segment of ", c,
             " elements exceeds MPI's int count limit ", INT_MAX, "; use smaller buckets");
    int_counts.push_back(int(c));
    if (r < rank_) offset += c;
  }
  const int64_t count = counts[size_t(rank_)];
  // MPI_IN_PLACE leaves this rank's result at the start of the (host) buffer: on the host it
  // moves to the segment on completion (the two may overlap); a CUDA tensor's goes from the
  // staged copy to the device segment. Every rank passes MPI_IN_PLACE, as MPI requires.
  const bool host_tensor = t.device().is_cpu();
  Tensor host = on_host(t);
  Tensor segment = t.slice(0, offset, offset + count);
  auto request = std::make_unique<MpiRequest>("ireduce_scatter", host.slice(0, 0, count),
                                              host_tensor ? Tensor() : segment, rank_);
  request->keep(host);
  if (host_tensor)
    request->move_on_completion(host.raw_data(), segment.raw_data(), segment.nbytes());
  const int* kept_counts = request->keep(std::move(int_counts));
  MPI_Request r = MPI_REQUEST_NULL;
  mpi_check(MPI_Ireduce_scatter(MPI_IN_PLACE, host.raw_data(), kept_counts, mpi_type(t.dtype()),
                                mpi_op(op), comm_, &r),
            "ireduce_scatter");
  request->add(r, kept_counts[rank_]);
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
void MpiCommunicator::staged_send(const Tensor& t, int, int) {
  no_staging("send", t);
}
void MpiCommunicator::staged_recv(Tensor& t, int, int) {
  no_staging("recv", t);
}

#endif

}  // namespace megatron
