// Launch shapes and deterministic reductions for the row-wise CUDA kernels (internal to
// src/kernels/cuda): LayerNorm, softmax, cross-entropy reduce along a row; bias gradients
// (dbias, dgamma, dbeta) reduce along columns.
//
// Determinism: no float atomics anywhere. Every sum is taken in an order fixed by the launch
// shape, and every launch shape is a function of the tensor sizes only (never of the GPU, its
// SM count or timing), so the same inputs give bit-identical outputs from run to run and on
// any GPU. The order differs from the CPU twin's, so CPU and GPU agree to rounding, not bits.
//
//  * Row reductions: a row is owned by one warp (rows of <= kWarpRowMaxCols columns, 8 rows per
//    256-thread block) or by one block (longer rows). Each thread sums its strided elements in
//    index order, then a butterfly (__shfl_xor_sync) combines the lanes — every lane ends with
//    the same bits — and, in block mode, every warp combines the per-warp results the same way.
//  * Column reductions over [N, C]: the rows are cut into column_chunks(N) fixed chunks; block
//    (column tile, chunk) sums its 32 columns over its chunk into partial[chunk, k, c] (8 row
//    lanes, each in row order, then lanes 0..7 in order); a second kernel adds the chunks in
//    chunk order and accumulates (+=) into the f32 output.
#pragma once

#include <math_constants.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace megatron::kernels::cuda {

// ---------------------------------------------------------------------------------------------
// Block reductions (the warp's: warp_reduce.cuh).

// Sum over a 1-D block (blockDim.x a multiple of 32, <= 1024), returned to every thread.
// smem: 32 floats of shared memory; the leading barrier lets consecutive calls reuse it.
__device__ __forceinline__ float block_sum(float v, float* smem) {
  v = warp_sum(v);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return warp_sum(lane < int(blockDim.x >> 5) ? smem[lane] : 0.f);
}

__device__ __forceinline__ float block_max(float v, float* smem) {
  v = warp_max(v);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  __syncthreads();
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  return warp_max(lane < int(blockDim.x >> 5) ? smem[lane] : -CUDART_INF_F);
}

// ---------------------------------------------------------------------------------------------
// Row kernels: one warp per row (kWarp, block (32, kWarpRowsPerBlock)) or one block per row
// (block (threads, 1)). A kernel loops `for (int64_t r = G::first(); r < rows; r += G::stride())`
// and takes its elements j = G::lane() + k·G::width(). In block mode the loop trip count is the
// same for every thread of the block, so the barriers inside block_sum are reached by all.

constexpr int kWarpRowsPerBlock = 8;
constexpr int64_t kWarpRowMaxCols = 1024;
constexpr int64_t kMaxGridX = int64_t(65535) * 32;

template <bool kWarp>
struct RowGroup {
  static __device__ __forceinline__ int lane() { return int(threadIdx.x); }
  static __device__ __forceinline__ int width() { return int(blockDim.x); }
  static __device__ __forceinline__ int64_t first() {
    return kWarp ? int64_t(blockIdx.x) * blockDim.y + threadIdx.y : int64_t(blockIdx.x);
  }
  static __device__ __forceinline__ int64_t stride() {
    return kWarp ? int64_t(gridDim.x) * blockDim.y : int64_t(gridDim.x);
  }
  static __device__ __forceinline__ float sum(float v, float* smem) {
    if constexpr (kWarp)
      return warp_sum(v);
    else
      return block_sum(v, smem);
  }
  static __device__ __forceinline__ float max(float v, float* smem) {
    if constexpr (kWarp)
      return warp_max(v);
    else
      return block_max(v, smem);
  }
};

struct RowLaunch {
  bool warp;
  dim3 grid;
  dim3 block;
};

// The launch shape for `rows` rows of `cols` elements (rows > 0); depends on the sizes only.
inline RowLaunch row_launch(int64_t rows, int64_t cols) {
  if (cols <= kWarpRowMaxCols) {
    const int64_t blocks = (rows + kWarpRowsPerBlock - 1) / kWarpRowsPerBlock;
    return {true, dim3(unsigned(std::min(blocks, kMaxGridX))), dim3(32, kWarpRowsPerBlock)};
  }
  const unsigned threads = cols <= 8192 ? 256u : 512u;
  return {false, dim3(unsigned(std::min(rows, kMaxGridX))), dim3(threads)};
}

// Calls fn(std::true_type{}) for warp rows or fn(std::false_type{}) for block rows; fn
// launches Kernel<..., decltype(tag)::value> with L.grid, L.block.
template <typename Fn>
void with_row_mode(const RowLaunch& L, Fn&& fn) {
  if (L.warp)
    fn(std::true_type{});
  else
    fn(std::false_type{});
}

// ---------------------------------------------------------------------------------------------
// Elementwise over [N, C] with the row and column of each element, without a 64-bit division
// per element: a flat grid-stride loop that advances (r, j) by the stride's (rows, cols).
// op(r, j, i) with i = r·C + j.

template <typename Op>
__global__ void __launch_bounds__(kThreads)
    rows_cols_kernel(Op op, int64_t n, int64_t c, int64_t stride_rows, int64_t stride_cols) {
  const int64_t total = n * c;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t r = i / c, j = i % c;
  for (; i < total; i += stride) {
    op(r, j, i);
    r += stride_rows;
    j += stride_cols;
    if (j >= c) {
      j -= c;
      ++r;
    }
  }
}

template <typename Op>
void launch_rows_cols(const Op& op, int64_t n, int64_t c, const char* name) {
  if (n <= 0 || c <= 0) return;
  const unsigned blocks = blocks_for(n * c);
  const int64_t stride = int64_t(blocks) * kThreads;
  rows_cols_kernel<<<blocks, kThreads, 0, stream()>>>(op, n, c, stride / c, stride % c);
  ::megatron::cuda::check_launch(name);
}

// Elementwise over n flat elements: op(i).
template <typename Op>
__global__ void __launch_bounds__(kThreads) flat_kernel(Op op, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    op(i);
}

template <typename Op>
void launch_flat(const Op& op, int64_t n, const char* name) {
  if (n <= 0) return;
  flat_kernel<<<blocks_for(n), kThreads, 0, stream()>>>(op, n);
  ::megatron::cuda::check_launch(name);
}

// ---------------------------------------------------------------------------------------------
// Column sums: out_k[c] += Σ_r v_k(r, c) for k < K, where op(r, c, i, v) fills v[K] (and may
// write outputs of element (r, c): each element is visited exactly once, by one thread).

constexpr int kColTile = 32;  // columns per block (one warp across a row: coalesced)
constexpr int kColLanes = 8;  // row lanes per block

// Row chunks of a column reduction: a function of N only (deterministic on any GPU).
inline int64_t column_chunks(int64_t n) {
  return std::clamp<int64_t>((n + 31) / 32, 1, 128);
}

template <int K, typename Op>
__global__ void __launch_bounds__(kColTile* kColLanes)
    column_partials_kernel(Op op, int64_t n, int64_t c, int64_t chunks, float* partial) {
  __shared__ float lanes[K][kColLanes][kColTile];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t tiles = (c + kColTile - 1) / kColTile;
  // Both loops have the same trip counts for every thread of the block (barriers inside).
  for (int64_t k = blockIdx.y; k < chunks; k += gridDim.y) {
    const int64_t r0 = n * k / chunks, r1 = n * (k + 1) / chunks;
    for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int64_t col = tile * kColTile + tx;
      float acc[K];
#pragma unroll
      for (int q = 0; q < K; ++q) acc[q] = 0.f;
      if (col < c)
        for (int64_t r = r0 + ty; r < r1; r += kColLanes) {
          float v[K];
          op(r, col, r * c + col, v);
#pragma unroll
          for (int q = 0; q < K; ++q) acc[q] += v[q];
        }
#pragma unroll
      for (int q = 0; q < K; ++q) lanes[q][ty][tx] = acc[q];
      __syncthreads();
      if (ty == 0 && col < c) {
#pragma unroll
        for (int q = 0; q < K; ++q) {
          float s = 0.f;
#pragma unroll
          for (int l = 0; l < kColLanes; ++l) s += lanes[q][l][tx];
          partial[(k * K + q) * c + col] = s;  // partial [chunks, K, C]
        }
      }
      __syncthreads();
    }
  }
}

template <int K>
struct ColumnOutputs {
  float* out[K];  // [C] f32 each, accumulated into
};

template <int K>
__global__ void __launch_bounds__(kThreads)
    column_finish_kernel(const float* partial, int64_t chunks, int64_t c, ColumnOutputs<K> outs) {
  for (int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; col < c;
       col += int64_t(gridDim.x) * blockDim.x) {
#pragma unroll
    for (int q = 0; q < K; ++q) {
      float s = 0.f;
      for (int64_t k = 0; k < chunks; ++k) s += partial[(k * K + q) * c + col];
      outs.out[q][col] += s;
    }
  }
}

// Runs op over every element of [n, c] and accumulates its K column sums into outs.
// `device` is where the scratch partial sums live (the operands' GPU).
template <int K, typename Op>
void column_sums(const Op& op, int64_t n, int64_t c, ColumnOutputs<K> outs, Device device,
                 const char* name) {
  if (n <= 0 || c <= 0) return;
  const int64_t chunks = column_chunks(n);
  // Freed at return; the caching allocator reuses it only for work queued after ours.
  Tensor partial = Tensor::empty({chunks, K, c}, DType::F32, device);
  const int64_t tiles = (c + kColTile - 1) / kColTile;
  const dim3 grid(unsigned(std::min(tiles, kMaxGridX)), unsigned(chunks));
  column_partials_kernel<K>
      <<<grid, dim3(kColTile, kColLanes), 0, stream()>>>(op, n, c, chunks, ptr<float>(partial));
  ::megatron::cuda::check_launch(name);
  column_finish_kernel<K>
      <<<blocks_for(c), kThreads, 0, stream()>>>(ptr<float>(partial), chunks, c, outs);
  ::megatron::cuda::check_launch(name);
}

}  // namespace megatron::kernels::cuda
