// A SIMT emulator for running CUDA kernels on the CPU, so that machines without a GPU (CI)
// execute the kernels' own code — their indexing, masks, barriers, warp reductions and shared
// memory — against the CPU twins.
//
// How a kernel runs: every CUDA thread of a block is a fiber (its own stack, switched by a few
// instructions of assembly) on the calling OS thread; the scheduler runs each fiber until it
// reaches a barrier or returns, releases a barrier once every thread it names has arrived, and
// runs the blocks of the grid one after the other, even blocks' threads first to last, odd
// blocks' last to first. One OS thread: the emulation is deterministic, and a data race between
// two CUDA threads that no barrier orders shows up as a wrong result in one of the two orders,
// not as flakiness.
//
// This header is force-included (-include) before every kernel source compiled for the
// emulator (tests/simt/rewrite_launches.pl rewrites each `k<<<grid, block, shared, stream>>>(args)`
// into a call of simt::Launcher, which launches here). It takes
// CUDA's host headers as they are and supplies what only nvcc provides:
//   * __global__, __device__, __launch_bounds__ mean nothing; __shared__ is `static`: one
//     variable for all threads of the block (blocks run one at a time). Statically sized shared
//     memory is therefore zeroed once, not garbage as on a GPU; dynamic shared memory
//     (dynamic_shared_memory()) is filled with garbage before each block.
//   * __syncthreads / __syncwarp are barriers of the block's / the warp's threads, and strict:
//     a barrier that not every thread of its block (or warp) reaches — one thread returned
//     early, or waits at a different barrier — is an error here, as it is undefined behaviour
//     (a hang, usually) on a GPU. __shfl_xor_sync exchanges through per-thread slots between
//     two warp barriers.
//   * nvcuda::wmma computes what the API promises (a 16×16×16 product with f32 accumulation,
//     row_major element (i, j) at p[i·ld + j], col_major at p[i + j·ld]); every lane of the
//     warp holds the whole tile and lane 0 stores it. It enforces what the hardware faults on:
//     pointers 256-bit aligned, ld a multiple of 16 bytes. The hardware's fragment layout is
//     not emulated: it is the API's business, and the API's contract is what a kernel relies on.
//   * The float intrinsics (__fmul_rn, …) are the IEEE operations they name; build with
//     -ffp-contract=off so that the host compiler fuses nothing the GPU code does not.
// Not emulated: timing, the memory model between blocks, streams (the emulated runtime,
// simt_cuda_runtime.cpp, runs everything in order on the host).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "simt_streams.h"

#define MEGATRON_SIMT 1

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __launch_bounds__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)
#define __grid_constant__

// CUDA's min/max for the kernels' integer arguments.
using std::max;
using std::min;

namespace megatron::simt {

struct ThreadIndex {
  unsigned x = 0, y = 0, z = 0;
};

// The running thread's and block's indices, and the running launch's shape.
inline ThreadIndex thread_index, block_index;
inline dim3 block_dim, grid_dim;

// Runs kernel() for every thread of every block of `grid` (blocks of `block` threads, a
// multiple of 32 in all), with `shared_bytes` of garbage-filled dynamic shared memory per block.
// Throws megatron::Error for a barrier some threads miss; rethrows what a thread throws.
void launch(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& kernel);

// The running block's dynamic shared memory (aligned to 128 bytes).
unsigned char* dynamic_shared_memory();

// Barriers of the running thread: the block's, its warp's.
void block_barrier();
void warp_barrier();
// The running thread's slot for warp exchanges (64 bits per thread).
uint64_t* exchange_slots();
// What a block barrier also reduces: any thread's predicate (for __syncthreads_or).
bool block_barrier_or(bool predicate);

// `k<<<grid, block, shared, stream>>>(args...)` rewritten as
// `Launcher([=](auto&&... a) { k(a...); }, grid, block, shared, stream)(args...)`: the call
// copies the arguments (as a launch does) and queues the launch on the stream (simt_streams.h);
// k's template arguments are deduced from the arguments' types in the lambda, as nvcc deduces
// them from the launch's.
template <typename Kernel>
struct Launcher {
  Launcher(Kernel k, dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr)
      : kernel(k), grid(g), block(b), shared(s), stream(st) {}
  template <typename... Args>
  void operator()(Args&&... args) const {
    enqueue(stream, [kernel = kernel, grid = grid, block = block, shared = shared,
                     saved = std::tuple<std::decay_t<Args>...>(std::forward<Args>(args)...)] {
      launch(grid, block, shared, [&] {
        // Each thread gets its own copy of the parameters (a kernel may modify them).
        std::tuple<std::decay_t<Args>...> own = saved;
        std::apply(kernel, own);
      });
    });
  }
  Kernel kernel;
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
};

}  // namespace megatron::simt

#define threadIdx (::megatron::simt::thread_index)
#define blockIdx (::megatron::simt::block_index)
#define blockDim (::megatron::simt::block_dim)
#define gridDim (::megatron::simt::grid_dim)

inline void __syncthreads() {
  ::megatron::simt::block_barrier();
}
inline int __syncthreads_or(int predicate) {
  return ::megatron::simt::block_barrier_or(predicate != 0) ? 1 : 0;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  MT_CHECK(mask == 0xffffffffu, "simt: __syncwarp with a partial mask is not emulated");
  ::megatron::simt::warp_barrier();
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  MT_CHECK(mask == 0xffffffffu && width == 32, "simt: partial-warp shuffles are not emulated");
  uint64_t* slots = ::megatron::simt::exchange_slots();
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned lane = t % 32;
  __syncwarp();  // every lane has read the previous exchange
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  slots[t] = bits;
  __syncwarp();
  T out;
  std::memcpy(&out, &slots[t - lane + (lane ^ unsigned(lane_mask))], sizeof out);
  return out;
}

// The runtime's typed overload, which cuda_runtime.h declares for nvcc only.
template <typename T>
cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}

// Atomics: threads switch only at barriers, so a read-modify-write is atomic by construction.
template <typename T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <typename T>
T atomicMin(T* p, T v) {
  const T old = *p;
  *p = std::min(old, v);
  return old;
}

// Round-to-nearest IEEE operations (the host's default rounding mode).
inline float __fadd_rn(float a, float b) {
  return a + b;
}
inline float __fsub_rn(float a, float b) {
  return a - b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fsqrt_rn(float a) {
  return std::sqrt(a);
}
inline float __fmaf_rn(float a, float b, float c) {
  return std::fma(a, b, c);
}
inline float __uint_as_float(unsigned v) {
  return std::bit_cast<float>(v);
}
inline unsigned __float_as_uint(float v) {
  return std::bit_cast<unsigned>(v);
}
inline float __int_as_float(int v) {
  return std::bit_cast<float>(v);
}
inline int __float_as_int(float v) {
  return std::bit_cast<int>(v);
}
inline float normcdff(float x) {
  return 0.5f * std::erfc(-x * 0.70710678118654752f);
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
