// Embedding gather and deterministic scatter-add on CUDA (contract: kernels/embedding.h).
//
// Forward: one block per output row (grid-stride over rows) copies the row's bits from the
// table, or writes zeros when this shard does not own the id.
//
// Backward, without floating-point atomics and with the CPU's summation order (for each table
// element, dtable += dout[n] for the owning tokens n in increasing order, starting from the
// value dtable holds):
//   1. keys[n] = ids[n] − vocab_start for owned ids, V_local (sorts last) for the others;
//      values[n] = n;
//   2. a stable radix sort of (key, n) by key (CUB): tokens grouped by table row, each group in
//      increasing n;
//   3. a block per (sorted position, 256-column tile); only the block at the first position of
//      a group works: its threads each own one column and add the group's rows in order.
// Every table element is written by exactly one thread, which sums in token order, so the
// result is bit-identical from run to run and equal to the CPU's.
#include <algorithm>
#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/float_bits.cuh"

namespace megatron::kernels::cuda {

namespace {

// out[r] = table[ids[r] − vocab_start] when owned, else zeros; E moves the element's bits.
template <typename E>
__global__ void embedding_forward_kernel(const int32_t* ids, const E* table, int64_t vocab_start,
                                         int64_t v, int64_t c, int64_t n, E* out) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const int64_t local = int64_t(ids[r]) - vocab_start;
    E* o = out + r * c;
    if (local >= 0 && local < v) {
      const E* row = table + local * c;
      for (int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = row[j];
    } else {
      for (int64_t j = threadIdx.x; j < c; j += blockDim.x) o[j] = E(0);  // +0.0 in any float
    }
  }
}

__global__ void sort_keys_kernel(const int32_t* ids, int64_t vocab_start, int64_t v, int64_t n,
                                 uint32_t* keys, uint32_t* tokens) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t local = int64_t(ids[i]) - vocab_start;
    keys[i] = uint32_t(local >= 0 && local < v ? local : v);
    tokens[i] = uint32_t(i);
  }
}

// Block (x = sorted position, y = column tile). Works only at the first position of a group of
// equal owned keys; then each thread adds the group's dout rows, in token order, to its column.
template <typename T>
__global__ void embedding_backward_kernel(const uint32_t* keys, const uint32_t* tokens, int64_t n,
                                          const T* dout, int64_t v, int64_t c, float* dtable) {
  const int64_t first = blockIdx.x;
  const uint32_t key = keys[first];
  if (int64_t(key) >= v) return;                    // not owned (sorted after every row)
  if (first > 0 && keys[first - 1] == key) return;  // not the first of its group
  const int64_t j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  int64_t end = first + 1;
  while (end < n && keys[end] == key) ++end;
  float* dst = dtable + int64_t(key) * c + j;
  const T* src = dout + j;
  float acc = *dst;
  int64_t r = first;
  // Loads of four rows in flight, additions strictly in order.
  for (; r + 4 <= end; r += 4) {
    const float g0 = exact_to_f32(src[int64_t(tokens[r]) * c]);
    const float g1 = exact_to_f32(src[int64_t(tokens[r + 1]) * c]);
    const float g2 = exact_to_f32(src[int64_t(tokens[r + 2]) * c]);
    const float g3 = exact_to_f32(src[int64_t(tokens[r + 3]) * c]);
    acc = __fadd_rn(acc, g0);
    acc = __fadd_rn(acc, g1);
    acc = __fadd_rn(acc, g2);
    acc = __fadd_rn(acc, g3);
  }
  for (; r < end; ++r) acc = __fadd_rn(acc, exact_to_f32(src[int64_t(tokens[r]) * c]));
  *dst = acc;
}

size_t align256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, int64_t vocab_start, Tensor& out) {
  const int64_t n = ids.numel(), v = table.size(0), c = table.size(1);
  if (n == 0 || c == 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(n, 65535 * 16));
  const int threads = c >= kThreads ? kThreads : int((c + 31) / 32 * 32);
  auto launch = [&](auto tag) {
    using E = decltype(tag);
    embedding_forward_kernel<E><<<blocks, threads, 0, stream()>>>(
        ptr<int32_t>(ids), static_cast<const E*>(table.raw_data()), vocab_start, v, c, n,
        static_cast<E*>(out.raw_data()));
    megatron::cuda::check_launch("embedding_forward");
  };
  switch (dtype_size(table.dtype())) {
    case 2:
      return launch(uint16_t{});
    case 4:
      return launch(uint32_t{});
    default:
      MT_THROW("embedding_forward table has dtype ", dtype_name(table.dtype()),
               ", expected f32, bf16 or f16");
  }
}

void embedding_backward(const Tensor& dout, const Tensor& ids, int64_t vocab_start,
                        Tensor& dtable) {
  const int64_t n = ids.numel(), v = dtable.size(0), c = dtable.size(1);
  if (n == 0 || c == 0 || v == 0) return;
  MT_CHECK(n < (int64_t(1) << 31) && v < (int64_t(1) << 31),
           "embedding_backward on CUDA handles fewer than 2^31 tokens and table rows, got ", n,
           " tokens and ", v, " rows");
  constexpr int64_t kMaxTiles = 65535;
  MT_CHECK((c + kThreads - 1) / kThreads <= kMaxTiles, "embedding_backward: ", c,
           " columns are more than the CUDA kernel's ", kMaxTiles * kThreads);
  // Radix sort only the bits a key can have (keys are <= v).
  int end_bit = 1;
  while (end_bit < 32 && (uint64_t(1) << end_bit) <= uint64_t(v)) ++end_bit;

  const int num = int(n);
  size_t sort_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, (const uint32_t*)nullptr,
                                                (uint32_t*)nullptr, (const uint32_t*)nullptr,
                                                (uint32_t*)nullptr, num, 0, end_bit, stream()));
  const size_t list_bytes = align256(size_t(n) * sizeof(uint32_t));
  Tensor scratch =
      Tensor::empty({int64_t(4 * list_bytes + align256(sort_bytes))}, DType::U8, dtable.device());
  char* base = static_cast<char*>(scratch.raw_data());  // 256-byte aligned (cudaMalloc)
  auto* keys_in = reinterpret_cast<uint32_t*>(base);
  auto* tokens_in = reinterpret_cast<uint32_t*>(base + list_bytes);
  auto* keys = reinterpret_cast<uint32_t*>(base + 2 * list_bytes);
  auto* tokens = reinterpret_cast<uint32_t*>(base + 3 * list_bytes);
  void* sort_temp = base + 4 * list_bytes;

  sort_keys_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(ptr<int32_t>(ids), vocab_start, v, n,
                                                             keys_in, tokens_in);
  megatron::cuda::check_launch("embedding_backward sort_keys");
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys_in, keys, tokens_in,
                                                tokens, num, 0, end_bit, stream()));
  const dim3 grid(unsigned(n), unsigned((c + kThreads - 1) / kThreads));
  dispatch_float(dout.dtype(), "embedding_backward dout", [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_kernel<T>
        <<<grid, kThreads, 0, stream()>>>(keys, tokens, n, ptr<T>(dout), v, c, ptr<float>(dtable));
    megatron::cuda::check_launch("embedding_backward");
  });
}

}  // namespace megatron::kernels::cuda
