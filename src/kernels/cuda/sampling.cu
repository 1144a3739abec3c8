// Token sampling kernels on CUDA (contract: kernels/sampling.h; CPU twin:
// kernels/cpu/sampling.cpp). The same draws as the CPU: the Gumbel noise of global id i is
// −log(−log(u_i)) with u_i from the same Philox stream, computed in f64 and added to the value
// in f64 before the one rounding to f32, and every comparison uses the CPU's order (larger
// value, then smaller id). The CPU takes its logarithms from the C library and the GPU from
// CUDA's (both within one ulp in f64), so the two could disagree only where two perturbed
// values land within an ulp of each other.
//
//  * topk_rows: each entry becomes one 64-bit key whose ascending order is the ranking
//    (high word: the value's bits mapped so that larger values sort first; low word: the id),
//    empty slots get the largest key; one CUB segmented radix sort orders every row, and the
//    first k keys of a row decode back to (value, id).
//  * gumbel_max_rows: one block per row; each thread keeps the best of its strided columns,
//    then the block merges them with the same total order (the result is independent of the
//    thread count, as the CPU's is of its chunking).
//  * sample_candidates: one thread per row walks its candidates in order, as the CPU does; the
//    number of incomplete rows comes back with one 4-byte copy.
#include <math_constants.h>

#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/philox.cuh"
#include "kernels/cuda/staged_upload.h"
#include "kernels/nucleus_support.h"

namespace megatron::kernels::cuda {

namespace {

constexpr uint64_t kEmptyKey = ~uint64_t(0);

// g = −log(−log(u)), u = (philox(seed, key, id) + ½) · 2⁻³², in f64 (CPU: cpu/sampling.cpp).
__device__ __forceinline__ double gumbel(uint64_t seed, uint64_t key, int64_t id) {
  const PhiloxWords w = philox4x32_10(seed, key, uint64_t(id) / 4);
  const double u = (double(w.w[uint64_t(id) % 4]) + 0.5) * 0x1p-32;
  return -log(-log(u));
}

__device__ __forceinline__ bool ranks_before(float va, int32_t ia, float vb, int32_t ib) {
  return va > vb || (va == vb && ia < ib);
}

// Ascending key order = descending value, then ascending id. The f32 bits are made monotone
// as unsigned integers (negative: all bits flipped; non-negative: sign bit set), then
// complemented so that larger values come first. −0 is keyed (and so comes back) as +0: the two
// are equal values, so their order must come from the ids alone, as on the CPU.
__device__ __forceinline__ uint64_t rank_key(float value, int32_t id) {
  const uint32_t raw = __float_as_uint(value);
  const uint32_t bits = (raw & 0x7fffffffu) == 0 ? 0u : raw;
  const uint32_t monotone = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (uint64_t(~monotone) << 32) | uint32_t(id);
}

__device__ __forceinline__ float key_value(uint64_t key) {
  const uint32_t monotone = ~uint32_t(key >> 32);
  return __uint_as_float((monotone & 0x80000000u) ? (monotone & 0x7fffffffu) : ~monotone);
}

// keys[r, c] for the row's c < cols entries; ids from `ids` [B, n] or id_offset + c.
__global__ void rank_keys_kernel(const float* values, const int32_t* ids, int64_t id_offset,
                                 int64_t rows, int64_t n, int64_t cols, uint64_t* keys) {
  const int64_t total = rows * cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const int32_t id = ids ? ids[r * n + c] : int32_t(id_offset + c);
    keys[i] = id < 0 ? kEmptyKey : rank_key(values[r * n + c], id);
  }
}

__global__ void segment_offsets_kernel(int64_t rows, int64_t cols, int* offsets) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r <= rows;
       r += int64_t(gridDim.x) * blockDim.x)
    offsets[r] = int(r * cols);
}

// out[r, j] for j < k from the sorted keys (cols per row); −inf / −1 past the live entries.
__global__ void take_topk_kernel(const uint64_t* sorted, int64_t rows, int64_t cols, int64_t k,
                                 float* out_values, int32_t* out_ids) {
  const int64_t total = rows * k;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / k, j = i % k;
    const uint64_t key = j < cols ? sorted[r * cols + j] : kEmptyKey;
    const bool live = key != kEmptyKey;
    out_values[i] = live ? key_value(key) : -CUDART_INF_F;
    out_ids[i] = live ? int32_t(uint32_t(key)) : -1;
  }
}

constexpr int kRowThreads = 256;

__global__ void __launch_bounds__(kRowThreads)
    gumbel_max_kernel(const float* values, int64_t n, int64_t id_offset, int64_t valid_cols,
                      uint64_t seed, const uint64_t* row_keys, float* out_values,
                      int32_t* out_ids) {
  const int64_t r = blockIdx.x;
  const float* row = values + r * n;
  const uint64_t key = row_keys[r];
  float bv = -CUDART_INF_F;
  int32_t bi = -1;
  for (int64_t c = threadIdx.x; c < valid_cols; c += blockDim.x) {
    const int32_t gid = int32_t(id_offset + c);
    const float p = float(double(row[c]) + gumbel(seed, key, gid));
    if (bi < 0 || ranks_before(p, gid, bv, bi)) {
      bv = p;
      bi = gid;
    }
  }
  __shared__ float sv[kRowThreads];
  __shared__ int32_t si[kRowThreads];
  sv[threadIdx.x] = bv;
  si[threadIdx.x] = bi;
  __syncthreads();
  for (int half = kRowThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) {
      const float ov = sv[threadIdx.x + half];
      const int32_t oi = si[threadIdx.x + half];
      if (oi >= 0 &&
          (si[threadIdx.x] < 0 || ranks_before(ov, oi, sv[threadIdx.x], si[threadIdx.x]))) {
        sv[threadIdx.x] = ov;
        si[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out_values[r] = si[0] >= 0 ? sv[0] : -CUDART_INF_F;
    out_ids[r] = si[0];
  }
}

__global__ void sample_candidates_kernel(const float* v, const int32_t* id, int64_t rows, int64_t c,
                                         const float* mx, const float* se, float top_p,
                                         bool whole_vocabulary, uint64_t seed,
                                         const uint64_t* row_keys, int32_t* out,
                                         unsigned* incomplete) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  // Candidates [0, keep) form the draw's support, as on the CPU.
  int64_t keep = c;
  bool complete = true;
  if (top_p > 0.0f) {
    const NucleusSupport support =
        nucleus_support(v + r * c, id + r * c, c, mx[r], se[r], top_p, whole_vocabulary);
    keep = support.keep;
    complete = support.complete;
  }
  if (!complete) {
    atomicAdd(incomplete, 1u);
    out[r] = -1;
    return;
  }
  float bv = -CUDART_INF_F;
  int32_t bi = -1;
  for (int64_t j = 0; j < keep; ++j) {
    const int32_t gid = id[r * c + j];
    if (gid < 0) continue;
    const float p = float(double(v[r * c + j]) + gumbel(seed, row_keys[r], gid));
    if (bi < 0 || ranks_before(p, gid, bv, bi)) {
      bv = p;
      bi = gid;
    }
  }
  out[r] = bi;
}

// The host's per-row Philox keys, on the device: u64 [rows], uploaded without a host
// synchronisation (staged_upload.h).
Tensor device_row_keys(const std::vector<uint64_t>& row_keys, const Device& device) {
  Tensor keys = Tensor::empty({int64_t(row_keys.size())}, DType::I64, device);
  staged_upload(keys.raw_data(), row_keys.data(), row_keys.size() * sizeof(uint64_t));
  return keys;
}

size_t align256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

}  // namespace

void topk_rows(const Tensor& values, const Tensor& ids, int64_t id_offset, int64_t valid_cols,
               Tensor& out_values, Tensor& out_ids) {
  const int64_t rows = values.size(0), n = values.size(1), k = out_values.size(1);
  const int64_t cols = ids.defined() ? n : valid_cols;
  const int64_t total = rows * cols;
  MT_CHECK(total < (int64_t(1) << 31), "topk_rows on CUDA sorts fewer than 2^31 entries, got ",
           rows, " rows of ", cols);
  if (total == 0) {
    take_topk_kernel<<<blocks_for(rows * k), kThreads, 0, stream()>>>(
        nullptr, rows, 0, k, ptr<float>(out_values), ptr<int32_t>(out_ids));
    megatron::cuda::check_launch("topk_rows take_topk");
    return;
  }
  size_t sort_bytes = 0;
  MT_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(
      nullptr, sort_bytes, (const uint64_t*)nullptr, (uint64_t*)nullptr, int(total), int(rows),
      (const int*)nullptr, (const int*)nullptr, 0, 64, stream()));
  const size_t key_bytes = align256(size_t(total) * sizeof(uint64_t));
  const size_t offset_bytes = align256(size_t(rows + 1) * sizeof(int));
  Tensor scratch = Tensor::empty({int64_t(2 * key_bytes + offset_bytes + align256(sort_bytes))},
                                 DType::U8, values.device());
  char* base = static_cast<char*>(scratch.raw_data());  // 256-byte aligned (cudaMalloc)
  auto* keys_in = reinterpret_cast<uint64_t*>(base);
  auto* keys = reinterpret_cast<uint64_t*>(base + key_bytes);
  auto* offsets = reinterpret_cast<int*>(base + 2 * key_bytes);
  void* sort_temp = base + 2 * key_bytes + offset_bytes;

  rank_keys_kernel<<<blocks_for(total), kThreads, 0, stream()>>>(
      ptr<float>(values), ids.defined() ? ptr<int32_t>(ids) : nullptr, id_offset, rows, n, cols,
      keys_in);
  megatron::cuda::check_launch("topk_rows rank_keys");
  segment_offsets_kernel<<<blocks_for(rows + 1), kThreads, 0, stream()>>>(rows, cols, offsets);
  megatron::cuda::check_launch("topk_rows segment_offsets");
  MT_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortKeys(sort_temp, sort_bytes, keys_in, keys,
                                                        int(total), int(rows), offsets, offsets + 1,
                                                        0, 64, stream()));
  take_topk_kernel<<<blocks_for(rows * k), kThreads, 0, stream()>>>(
      keys, rows, cols, k, ptr<float>(out_values), ptr<int32_t>(out_ids));
  megatron::cuda::check_launch("topk_rows take_topk");
}

void gumbel_max_rows(const Tensor& values, int64_t id_offset, int64_t valid_cols, uint64_t seed,
                     const std::vector<uint64_t>& row_keys, Tensor& out_values, Tensor& out_ids) {
  const int64_t rows = values.size(0);
  if (rows == 0) return;
  MT_CHECK(rows <= 65535 * 32, "gumbel_max_rows on CUDA takes at most ", 65535 * 32, " rows, got ",
           rows);
  const Tensor keys = device_row_keys(row_keys, values.device());
  gumbel_max_kernel<<<unsigned(rows), kRowThreads, 0, stream()>>>(
      ptr<float>(values), values.size(1), id_offset, valid_cols, seed,
      static_cast<const uint64_t*>(keys.raw_data()), ptr<float>(out_values), ptr<int32_t>(out_ids));
  megatron::cuda::check_launch("gumbel_max_rows");
}

int64_t sample_candidates(const Tensor& values, const Tensor& ids, const Tensor& row_max,
                          const Tensor& sum_exp, float top_p, bool whole_vocabulary, uint64_t seed,
                          const std::vector<uint64_t>& row_keys, Tensor& out_ids) {
  const int64_t rows = values.size(0);
  if (rows == 0) return 0;
  const bool nucleus = top_p > 0.0f;
  const Tensor keys = device_row_keys(row_keys, values.device());
  Tensor incomplete = Tensor::zeros({1}, DType::I32, values.device());
  sample_candidates_kernel<<<blocks_for(rows), kThreads, 0, stream()>>>(
      ptr<float>(values), ptr<int32_t>(ids), rows, values.size(1),
      nucleus ? ptr<float>(row_max) : nullptr, nucleus ? ptr<float>(sum_exp) : nullptr, top_p,
      whole_vocabulary, seed, static_cast<const uint64_t*>(keys.raw_data()), ptr<int32_t>(out_ids),
      static_cast<unsigned*>(incomplete.raw_data()));
  megatron::cuda::check_launch("sample_candidates");
  unsigned host = 0;
  megatron::cuda::copy_async(&host, incomplete.raw_data(), sizeof(host), /*host_involved=*/true);
  return int64_t(host);
}

}  // namespace megatron::kernels::cuda
