// A SIMT emulator for running CUDA kernels on the CPU, so that machines without a GPU (CI)
// execute the kernels' own code — their indexing, masks, barriers, warp reductions and shared
// memory — against the CPU twins.
//
// How a kernel runs: every CUDA thread of a block is a fiber (its own stack, switched by a few
// instructions of assembly) on the calling OS thread; the scheduler runs each fiber until it
// reaches a barrier or returns, releases a barrier once every thread it names has arrived, runs
// each warp all the way to its next __syncthreads before the next warp starts (the most skew
// between warps a GPU may show), and runs the blocks of the grid one after the other, even
// blocks' warps and lanes first to last, odd blocks' last to first. One OS thread: the emulation is
// deterministic, and a data race between two CUDA threads that no barrier orders shows up as a
// wrong result in one of the two orders, not as flakiness.
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
//   * The PTX warp-matrix instructions that kernels/cuda/mma_fragments.cuh wraps (mma.sync
//     m16n8k16 and ldmatrix) are emulated in their documented fragment layouts (PTX ISA,
//     "Matrix fragments for mma.m16n8k16" and "ldmatrix"): each lane's registers hold exactly
//     the elements the ISA assigns it, so a kernel that puts an element in the wrong register
//     computes a wrong product here as on a GPU. ldmatrix checks the 16-byte row alignment the
//     hardware faults on, and that the rows are not local or global memory.
//   * cp.async (kernels/cuda/async_copy.cuh) lands its copies either at once or only at the
//     cp.async.wait_group that covers them, blocks alternating like their thread order.
//   * The float intrinsics (__fmul_rn, …) are the IEEE operations they name; build with
//     -ffp-contract=off so that the host compiler fuses nothing the GPU code does not.
// Not emulated: timing, the memory model between blocks, streams (the emulated runtime,
// simt_cuda_runtime.cpp, runs everything in order on the host).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
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
// False where p is surely not shared memory: a thread's stack (local memory) or device memory
// (global). Static __shared__ variables are ordinary statics here, so anything else may be.
bool may_be_shared_memory(const void* p);

// Barriers of the running thread: the block's, its warp's.
void block_barrier();
void warp_barrier();
// The running thread's slot for warp exchanges (64 bits per thread).
uint64_t* exchange_slots();
// What a block barrier also reduces: any thread's predicate (for __syncthreads_or).
bool block_barrier_or(bool predicate);
// cp.async (kernels/cuda/async_copy.cuh): a copy of `bytes` from global to shared memory that
// lands at once or at the cp.async.wait_group that covers it (blocks alternate); the commit
// closes the running thread's group; the wait lands all but its newest `newest_pending`
// committed groups.
void async_copy(void* to, const void* from, size_t bytes);
void async_copy_commit();
void async_copy_wait(int newest_pending);

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
namespace megatron::simt {

// The running thread's index in its block, x fastest, and its lane in its warp.
inline unsigned linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
inline unsigned lane_id() {
  return linear_thread() % 32;
}

// The values v of the 32 lanes of the running thread's warp, by lane (through the exchange
// slots, between two warp barriers).
template <typename T>
std::array<T, 32> warp_gather(T v) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>);
  uint64_t* slots = exchange_slots();
  const unsigned t = linear_thread();
  __syncwarp();  // every lane has read the previous exchange
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  slots[t] = bits;
  __syncwarp();
  std::array<T, 32> all;
  for (unsigned lane = 0; lane < 32; ++lane)
    std::memcpy(&all[lane], &slots[t - t % 32 + lane], sizeof(T));
  return all;
}

}  // namespace megatron::simt

template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  MT_CHECK(mask == 0xffffffffu && width == 32, "simt: partial-warp shuffles are not emulated");
  return ::megatron::simt::warp_gather(v)[::megatron::simt::lane_id() ^ unsigned(lane_mask)];
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
  if (::megatron::simt::lane_id() == 0)
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

namespace megatron::simt {

// A 16-bit operand element (bits) in f32: exact.
template <typename T>
float widen_bits(uint16_t bits) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>);
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return std::bit_cast<float>(uint32_t(bits) << 16);
  else
    return __half2float(__ushort_as_half(bits));
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32: d = A·B + c for the warp's
// A [16, 16] and B [16, 8], lane l = 4·g + t holding (two elements per 32-bit register, the
// lower column or row in the low half): a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1],
// a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]; b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g];
// c, d: [0, 1] = row g, columns 2t, 2t+1; [2, 3] = row g+8. The products are exact in f32
// and summed in k order onto c (the hardware's order is its own: within the f32 rounding the
// tests allow).
template <typename T>
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  const auto a01 = warp_gather(uint64_t(a[0]) | uint64_t(a[1]) << 32);
  const auto a23 = warp_gather(uint64_t(a[2]) | uint64_t(a[3]) << 32);
  const auto b01 = warp_gather(uint64_t(b[0]) | uint64_t(b[1]) << 32);
  float A[16][16], B[16][8];
  auto halves = [](uint64_t regs, int reg, float* lo_hi) {
    const uint32_t r = uint32_t(regs >> (32 * reg));
    lo_hi[0] = widen_bits<T>(uint16_t(r & 0xffffu));
    lo_hi[1] = widen_bits<T>(uint16_t(r >> 16));
  };
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    halves(a01[l], 0, &A[g][2 * t]);
    halves(a01[l], 1, &A[g + 8][2 * t]);
    halves(a23[l], 0, &A[g][2 * t + 8]);
    halves(a23[l], 1, &A[g + 8][2 * t + 8]);
    float pair[2];
    halves(b01[l], 0, pair);
    B[2 * t][g] = pair[0];
    B[2 * t + 1][g] = pair[1];
    halves(b01[l], 1, pair);
    B[2 * t + 8][g] = pair[0];
    B[2 * t + 9][g] = pair[1];
  }
  const int lane = int(lane_id()), g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
    float sum = d[e];
    for (int k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
    d[e] = sum;
  }
}

// ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: four 8×8 matrices of 16-bit elements whose
// rows lanes 8j .. 8j+7 address (row_address: 16 bytes, 16-byte aligned). Lane l = 4·g + t
// receives in r[j] matrix j's elements (g, 2t) and (g, 2t+1); with trans, (2t, g) and
// (2t+1, g).
inline void ldmatrix_x4(uint32_t (&r)[4], const void* row_address, bool trans) {
  MT_CHECK(reinterpret_cast<uintptr_t>(row_address) % 16 == 0, "ldmatrix: row address ",
           row_address, " of lane ", lane_id(), " is not 16-byte aligned");
  MT_CHECK(may_be_shared_memory(row_address), "ldmatrix: row address ", row_address, " of lane ",
           lane_id(), " is not shared memory (a thread's local or the device's global)");
  const auto rows = warp_gather(reinterpret_cast<uintptr_t>(row_address));
  const int lane = int(lane_id()), g = lane / 4, t = lane % 4;
  auto element = [&](int matrix, int row, int col) {
    uint16_t v;
    std::memcpy(&v, reinterpret_cast<const unsigned char*>(rows[8 * matrix + row]) + 2 * col, 2);
    return uint32_t(v);
  };
  for (int j = 0; j < 4; ++j)
    r[j] = trans ? element(j, 2 * t, g) | element(j, 2 * t + 1, g) << 16
                 : element(j, g, 2 * t) | element(j, g, 2 * t + 1) << 16;
}

}  // namespace megatron::simt
