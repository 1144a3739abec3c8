#include "distributed/mpi_communicator.h"

#include <algorithm>
#include <climits>

#include "distributed/collective_checks.h"

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
  MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(t, [&](void* p, int count) {
    mpi_check(MPI_Bcast(p, count, type, root, comm_), "broadcast");
  });
}

void MpiCommunicator::send(const Tensor& t, int dst, int tag) {
  check_comm_tensor(t, "send", "tensor");
  check_peer_rank(dst, size_, "send", "destination");
  MT_CHECK(dst != rank_, "send: rank ", rank_, " cannot send to itself (blocking send)");
  MPI_Datatype type = mpi_type(t.dtype());
  for_each_chunk(
      t, [&](void* p, int count) { mpi_check(MPI_Send(p, count, type, dst, tag, comm_), "send"); });
}

void MpiCommunicator::recv(Tensor& t, int src, int tag) {
  check_comm_tensor(t, "recv", "tensor");
  check_peer_rank(src, size_, "recv", "source");
  MT_CHECK(src != rank_, "recv: rank ", rank_, " cannot receive from itself (blocking recv)");
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

void MpiCommunicator::barrier() {
  mpi_check(MPI_Barrier(comm_), "barrier");
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  check_split_color(color);
  MPI_Comm sub = MPI_COMM_NULL;
  mpi_check(MPI_Comm_split(comm_, color, key, &sub), "split");
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(sub, max_chunk_elements_));
}

}  // namespace megatron
