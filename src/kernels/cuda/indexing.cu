// Index kernels on CUDA (contract: kernels/indexing.h): position ids and the range check of
// token ids.
//
// first_out_of_range is a min-reduction over indices: each thread finds the first bad index of
// its grid-stride sequence, each block takes the minimum of its threads, and the blocks combine
// with an integer atomicMin. Integer minimum is exact and order-free, so the answer (the
// smallest bad index, or −1) is the same on every run.
#include <climits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace megatron::kernels::cuda {

namespace {

template <typename I>
__global__ void fill_positions_kernel(I* ids, int64_t n, int64_t batch, int64_t start) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    ids[i] = I(start + i / batch);
}

constexpr unsigned long long kNone = ULLONG_MAX;

template <typename I>
__global__ void first_out_of_range_kernel(const I* ids, int64_t n, int64_t lo, int64_t hi,
                                          unsigned long long* first) {
  __shared__ unsigned long long shared[kThreads];
  unsigned long long mine = kNone;
  // A thread's indices grow, so its first hit is its smallest.
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = int64_t(ids[i]);
    if (id < lo || id >= hi) {
      mine = (unsigned long long)i;
      break;
    }
  }
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half >>= 1) {
    if (int(threadIdx.x) < half && shared[threadIdx.x + half] < shared[threadIdx.x])
      shared[threadIdx.x] = shared[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0 && shared[0] != kNone) atomicMin(first, shared[0]);
}

template <typename Fn>
void dispatch_index(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::I32:
      return fn(int32_t{});
    case DType::I64:
      return fn(int64_t{});
    default:
      MT_THROW(what, " has dtype ", dtype_name(dtype), ", expected i32 or i64");
  }
}

}  // namespace

void fill_positions(Tensor& ids, int64_t batch, int64_t start) {
  const int64_t n = ids.numel();
  if (n == 0) return;
  MT_CHECK(batch > 0, "fill_positions batch must be positive, got ", batch);
  dispatch_index(ids.dtype(), "fill_positions ids", [&](auto tag) {
    using I = decltype(tag);
    fill_positions_kernel<I>
        <<<blocks_for(n), kThreads, 0, stream()>>>(ptr<I>(ids), n, batch, start);
    megatron::cuda::check_launch("fill_positions");
  });
}

int64_t first_out_of_range(const Tensor& ids, int64_t lo, int64_t hi) {
  const int64_t n = ids.numel();
  if (n == 0) return -1;
  Tensor result = Tensor::empty({1}, DType::I64, ids.device());
  auto* first = static_cast<unsigned long long*>(result.raw_data());
  MT_CUDA_CHECK(cudaMemsetAsync(first, 0xff, sizeof(*first), stream()));  // kNone
  dispatch_index(ids.dtype(), "first_out_of_range ids", [&](auto tag) {
    using I = decltype(tag);
    first_out_of_range_kernel<I>
        <<<blocks_for(n), kThreads, 0, stream()>>>(ptr<I>(ids), n, lo, hi, first);
    megatron::cuda::check_launch("first_out_of_range");
  });
  unsigned long long host = kNone;
  megatron::cuda::copy_async(&host, first, sizeof(host), /*host_involved=*/true);
  return host == kNone ? -1 : int64_t(host);
}

}  // namespace megatron::kernels::cuda
