// Ring all-reduce and reduce-scatter over MPI point-to-point (contract: ring_reduction.h).
#include "distributed/ring_reduction.h"

#include <algorithm>
#include <climits>

#include "distributed/mpi_types.h"

namespace megatron {

namespace {

// dst (op)= src over n elements.
template <typename T>
void reduce_into(T* dst, const T* src, int64_t n, ReduceOp op) {
  if (op == ReduceOp::SUM) {
#pragma omp parallel for simd if (n > (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  } else {
#pragma omp parallel for simd if (n > (int64_t(1) << 16))
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] > dst[i] ? src[i] : dst[i];
  }
}

int tag_upper_bound(MPI_Comm comm) {
  int* value = nullptr;
  int flag = 0;
  mpi_check(MPI_Comm_get_attr(comm, MPI_TAG_UB, &value, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
  return flag && value != nullptr ? *value : 32767;  // MPI guarantees at least 32767
}

int mod(int a, int p) {
  return ((a % p) + p) % p;
}

}  // namespace

Tensor RingBufferPool::take(DType dtype, int64_t numel) {
  const size_t bytes = size_t(numel) * dtype_size(dtype);
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i]->bytes() >= bytes) {
      std::shared_ptr<Storage> storage = std::move(free_[i]);
      free_.erase(free_.begin() + std::ptrdiff_t(i));
      return Tensor(std::move(storage), 0, {numel}, {1}, dtype);
    }
  return Tensor::empty({numel}, dtype);
}

void RingBufferPool::give(const Tensor& buffer) {
  free_.push_back(buffer.storage());
}

std::vector<int64_t> RingReduction::even_segments(int64_t numel, int size) {
  std::vector<int64_t> counts(size_t(size), numel / size);
  for (int64_t j = 0; j < numel % size; ++j) ++counts[size_t(j)];
  return counts;
}

RingReduction::RingReduction(MPI_Comm comm, int rank, int size, Tensor buffer,
                             const std::vector<int64_t>& segment_counts, ReduceOp op, bool gather,
                             uint64_t sequence, std::shared_ptr<RingBufferPool> pool)
    : comm_(comm),
      pool_(std::move(pool)),
      rank_(rank),
      size_(size),
      buffer_(std::move(buffer)),
      op_(op),
      gather_(gather) {
  MT_CHECK(int(segment_counts.size()) == size_, "ring reduction: ", segment_counts.size(),
           " segment counts for ", size_, " ranks");
  offsets_.assign(1, 0);
  for (int64_t c : segment_counts) {
    MT_CHECK(c >= 0 && c <= INT_MAX, "ring reduction: a segment of ", c,
             " elements is outside MPI's int count range; use smaller buckets");
    offsets_.push_back(offsets_.back() + c);
  }
  // The receive buffer holds the largest segment this rank receives in the reduce-scatter
  // steps: every segment but (rank − 1)'s, which it only sends (at 2 ranks: its own only).
  int64_t largest = 0;
  for (int k = 0; k + 1 < size_; ++k)
    largest = std::max(largest, segment_counts[size_t(mod(rank_ - k - 2, size_))]);
  MT_CHECK(offsets_.back() == buffer_.numel(), "ring reduction: segments of ", offsets_.back(),
           " elements for a buffer of ", buffer_.numel());
  // Tags: 2(p − 1) steps per reduction at most, one block of 2p tags per sequence number.
  const int64_t block = 2 * int64_t(size_);
  const int64_t slots = std::max<int64_t>(1, tag_upper_bound(comm_) / block);
  tag_base_ = int(int64_t(sequence % uint64_t(slots)) * block);
  if (size_ > 1) {
    received_ = pool_->take(buffer_.dtype(), std::max<int64_t>(largest, 1));
    post(0);
  } else {
    step_ = steps();
  }
}

RingReduction::~RingReduction() {
  if (done_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE);
  release();
}

void RingReduction::release() {
  if (received_.defined()) pool_->give(received_);
  received_ = Tensor();
}

int RingReduction::steps() const {
  return (gather_ ? 2 : 1) * (size_ - 1);
}

Tensor RingReduction::segment(int index) const {
  return buffer_.slice(0, offsets_[size_t(index)], offsets_[size_t(index) + 1]);
}

void RingReduction::post(int step) {
  const int next = mod(rank_ + 1, size_), previous = mod(rank_ - 1, size_);
  const bool reducing = step < size_ - 1;
  const int k = reducing ? step : step - (size_ - 1);
  const int send_index = reducing ? mod(rank_ - k - 1, size_) : mod(rank_ - k, size_);
  const int receive_index = reducing ? mod(rank_ - k - 2, size_) : mod(rank_ - k - 1, size_);
  const Tensor out = segment(send_index), in = segment(receive_index);
  void* destination = reducing ? received_.raw_data() : in.raw_data();
  const MPI_Datatype type = mpi_type(buffer_.dtype());
  mpi_check(MPI_Irecv(destination, int(in.numel()), type, previous, tag_base_ + step, comm_,
                      &requests_[0]),
            "ring reduction (receive)");
  mpi_check(MPI_Isend(out.raw_data(), int(out.numel()), type, next, tag_base_ + step, comm_,
                      &requests_[1]),
            "ring reduction (send)");
}

void RingReduction::finish_step(int step) {
  if (step < size_ - 1) {  // reduce-scatter: add the neighbour's partial sum
    Tensor in = segment(mod(rank_ - step - 2, size_));
    const int64_t n = in.numel();
    switch (buffer_.dtype()) {
      case DType::F32:
        reduce_into(in.data<float>(), received_.data<float>(), n, op_);
        break;
      case DType::F64:
        reduce_into(in.data<double>(), received_.data<double>(), n, op_);
        break;
      case DType::I32:
        reduce_into(in.data<int32_t>(), received_.data<int32_t>(), n, op_);
        break;
      case DType::I64:
        reduce_into(in.data<int64_t>(), received_.data<int64_t>(), n, op_);
        break;
      default:
        MT_THROW("ring reduction: dtype ", dtype_name(buffer_.dtype()), " cannot be reduced");
    }
  }
  if (step + 1 < steps()) post(step + 1);
}

void RingReduction::progress() {
  while (!done_ && step_ < steps()) {
    int flag = 0;
    mpi_check(MPI_Testall(2, requests_, &flag, MPI_STATUSES_IGNORE), "ring reduction");
    if (!flag) return;
    finish_step(step_++);
  }
}

void RingReduction::wait() {
  if (done_) return;
  while (step_ < steps()) {
    mpi_check(MPI_Waitall(2, requests_, MPI_STATUSES_IGNORE), "ring reduction");
    finish_step(step_++);
  }
  done_ = true;
  release();
  if (on_completion_) on_completion_();
}

}  // namespace megatron
