// A SIMT emulator for running CUDA kernels on the CPU: one std::thread per CUDA thread of a
// block, blocks one after the other, so that machines without a GPU (CI) execute the kernels'
// own code — their indexing, masks, barriers and warp reductions — against the CPU twins.
//
// Include it before a kernel header (e.g. kernels/cuda/flash_attention_kernels.cuh). It takes
// CUDA's host headers as they are and supplies what only nvcc provides:
//   * __global__, __device__, __shared__, __launch_bounds__ mean nothing: a kernel is a host
//     function; threadIdx and blockIdx are per-thread, blockDim and gridDim per launch;
//   * __syncthreads / __syncwarp are barriers of the block's / the warp's threads;
//     __shfl_xor_sync exchanges through the warp's slots between two warp barriers;
//   * nvcuda::wmma computes what the API promises (a 16×16×16 product with f32 accumulation,
//     row_major element (i, j) at p[i·ld + j], col_major at p[i + j·ld]); every lane of the
//     warp holds the whole tile and lane 0 stores it. It also enforces what the hardware faults
//     on: pointers 256-bit aligned, ld a multiple of 16 bytes. The hardware's fragment layout is
//     not emulated: it is the API's business, and the API's contract is what a kernel relies on.
// A kernel's dynamic shared memory is one buffer per launch (blocks run one at a time), filled
// with garbage before each block, as on a GPU. Not emulated: timing, the memory model between
// blocks, and anything a kernel would do outside its block's barriers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/error.h"

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __shared__
#define __launch_bounds__(...)
#define __grid_constant__

// CUDA's min/max for the kernels' int64_t arguments.
using std::max;
using std::min;

namespace megatron::simt {

struct ThreadIndex {
  unsigned x = 0, y = 0, z = 0;
};

// The threads of the block being run: its barriers and the warps' shuffle slots.
struct Block {
  explicit Block(unsigned threads) : block(threads), exchange(threads) {
    for (unsigned w = 0; w < threads / 32; ++w)
      warps.push_back(std::make_unique<std::barrier<>>(32));
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  std::vector<float> exchange;  // one slot per thread
};

inline thread_local ThreadIndex thread_index, block_index;
inline thread_local Block* current_block = nullptr;
inline dim3 block_dim, grid_dim;

// Runs kernel() for every thread of every block of `grid` (blocks of `threads` threads, a
// multiple of 32), with `shared` (shared_bytes, garbage-filled) as each block's dynamic shared
// memory.
template <typename Kernel>
void launch(dim3 grid, unsigned threads, unsigned char* shared, size_t shared_bytes,
            Kernel kernel) {
  MT_CHECK(threads % 32 == 0 && threads > 0, "simt::launch: ", threads, " threads per block");
  grid_dim = grid;
  block_dim = dim3(threads);
  Block block(threads);
  // One thread per CUDA thread for the whole launch; each runs every block in turn, the block
  // barrier between two blocks (thread 0 fills the next block's shared memory with garbage).
  auto body = [&](unsigned t) {
    thread_index = {t, 0, 0};
    current_block = &block;
    for (unsigned z = 0; z < grid.z; ++z)
      for (unsigned y = 0; y < grid.y; ++y)
        for (unsigned x = 0; x < grid.x; ++x) {
          if (t == 0) std::memset(shared, 0xA5, shared_bytes);  // NaN-like garbage in bf16/f32
          block.block.arrive_and_wait();
          block_index = {x, y, z};
          kernel();
          block.block.arrive_and_wait();
        }
  };
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (std::thread& th : pool) th.join();
}

}  // namespace megatron::simt

#define threadIdx (::megatron::simt::thread_index)
#define blockIdx (::megatron::simt::block_index)
#define blockDim (::megatron::simt::block_dim)
#define gridDim (::megatron::simt::grid_dim)

inline void __syncthreads() {
  ::megatron::simt::current_block->block.arrive_and_wait();
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  ::megatron::simt::current_block->warps[threadIdx.x / 32]->arrive_and_wait();
}
inline float __shfl_xor_sync(unsigned, float v, int lane_mask, int = 32) {
  std::vector<float>& slots = ::megatron::simt::current_block->exchange;
  const unsigned t = threadIdx.x, lane = t % 32;
  __syncwarp();  // the previous exchange has been read
  slots[t] = v;
  __syncwarp();
  return slots[t - lane + (lane ^ unsigned(lane_mask))];
}

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator knows 16x16x16 only");
  float x[16][16];
};

// The API's rules for a tile's pointer and leading dimension (elements of `bytes` each).
inline void check_tile_address(const void* p, unsigned ld, size_t bytes) {
  MT_CHECK(reinterpret_cast<uintptr_t>(p) % 32 == 0, "wmma: tile pointer ", p,
           " is not 256-bit aligned");
  MT_CHECK((ld * bytes) % 16 == 0, "wmma: leading dimension ", ld,
           " is not a multiple of 16 bytes");
}

inline float widen(float v) {
  return v;
}
inline float widen(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
inline float widen(__half v) {
  return __half2float(v);
}

template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ld) {
  check_tile_address(p, ld, sizeof(T));
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      f.x[i][j] = widen(std::is_same_v<Layout, col_major> ? p[i + j * ld] : p[i * ld + j]);
  __syncwarp();
}
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ld, layout_t layout) {
  check_tile_address(p, ld, sizeof(float));
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j)
      f.x[i][j] = layout == mem_row_major ? p[i * ld + j] : p[i + j * ld];
  __syncwarp();
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ld, layout_t layout) {
  check_tile_address(p, ld, sizeof(float));
  __syncwarp();  // every lane has loaded what lane 0 overwrites
  if (threadIdx.x % 32 == 0)
    for (int i = 0; i < 16; ++i)
      for (int j = 0; j < 16; ++j)
        (layout == mem_row_major ? p[i * ld + j] : p[i + j * ld]) = f.x[i][j];
  __syncwarp();
}
inline void fill_fragment(fragment<accumulator, 16, 16, 16, float>& f, float v) {
  for (auto& row : f.x) std::fill(std::begin(row), std::end(row), v);
}
template <typename A, typename B>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const A& a, const B& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  float r[16][16];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float sum = c.x[i][j];
      for (int k = 0; k < 16; ++k) sum += a.x[i][k] * b.x[k][j];
      r[i][j] = sum;
    }
  std::memcpy(d.x, r, sizeof r);
}

}  // namespace nvcuda::wmma
