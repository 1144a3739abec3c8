// Warp-level tensor-core products on registers (internal to src/kernels/cuda): PTX's
// mma.sync m16n8k16 (16-bit operands, f32 accumulators; sm_80 and later) and ldmatrix, which
// loads a warp's operand fragments from shared memory, plus the index arithmetic that puts each
// element where the instruction expects it.
//
// Why not WMMA: WMMA's fragment layout is opaque, so a kernel must store an accumulator to
// shared memory before it can touch its elements. With these instructions the layout is the ISA's
// (PTX ISA, "Matrix fragments for mma.m16n8k16"), so a kernel can scale, mask and exponentiate
// accumulators in registers and feed them to the next product as operands without a round trip
// through shared memory — what FlashAttention-2 does.
//
// Fragments of one warp, lane l = 4·g + t (g = l / 4, t = l % 4), two 16-bit elements per 32-bit
// register, the lower column (or row) in the low half:
//   A [16, 16] (row-major):   a0 = A[g][2t..2t+1]    a1 = A[g+8][2t..2t+1]
//                             a2 = A[g][2t+8..2t+9]  a3 = A[g+8][2t+8..2t+9]
//   B [16, 8]  (col-major):   b0 = B[2t..2t+1][g]    b1 = B[2t+8..2t+9][g]
//   C [16, 8]  (f32):         c0, c1 = C[g][2t..2t+1]  c2, c3 = C[g+8][2t..2t+1]
// An accumulator tile [16, 16] (two C tiles side by side) is, element for element, an A fragment:
// rounded and packed, it multiplies the next operand directly (to_a_fragments).
//
// Under the SIMT emulator (tests/simt) the instructions are its emulations, in the same layouts.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"

namespace megatron::kernels::cuda::mma {

// d += A·B for one warp (fragments as above); T is the operands' type (bf16 or f16).
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                             const uint32_t (&b)[2]) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>);
#if defined(MEGATRON_SIMT)
  ::megatron::simt::mma_m16n8k16<T>(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(__CUDA_ARCH__)
  __trap();  // the host dispatches here only on sm_80 and later
#endif
}

// ldmatrix .x4 (trans: .trans): lanes 8j .. 8j+7 give the row addresses (shared memory, 16 bytes
// each, 16-byte aligned) of 8×8 matrix j; r[j] receives matrix j's elements (g, 2t..2t+1), or
// with trans (2t..2t+1, g).
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
#if defined(MEGATRON_SIMT)
  ::megatron::simt::ldmatrix_x4(r, row_address, kTrans);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = unsigned(__cvta_generic_to_shared(row_address));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// Two floats rounded to T (nearest even) and packed: lo in the low half.
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return uint32_t(__bfloat16_as_ushort(from_f32<T>(lo))) |
           uint32_t(__bfloat16_as_ushort(from_f32<T>(hi))) << 16;
  else
    return uint32_t(__half_as_ushort(from_f32<T>(lo))) | uint32_t(__half_as_ushort(from_f32<T>(hi)))
                                                             << 16;
}

// This lane's row address for ldmatrix_x4 over the 16×16 block at (r0, c0) of a row-major
// shared tile with leading dimension ld, in the order (rows 0-7, cols 0-7), (rows 8-15, cols
// 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15). Non-transposed, that is an A fragment
// a0..a3 of the block. Transposed (the block holding B [k = rows, n = cols]), it is the B
// fragments b0, b1 of n-tile c0 .. c0+7, then b0, b1 of n-tile c0+8 .. c0+15.
template <typename T>
__device__ __forceinline__ const T* block_rows(const T* tile, int ld, int r0, int c0) {
  const int lane = int(threadIdx.x) % 32;
  return tile + (r0 + lane % 8 + 8 * (lane / 8 % 2)) * ld + c0 + 8 * (lane / 16);
}

// This lane's row address for ldmatrix_x4 (not transposed) over the 16×16 block at (n0, k0) of a
// shared tile holding B transposed (row n holds B[k][n] at column k, i.e. B col-major): the B
// fragments b0, b1 of n-tile n0 .. n0+7, then b0, b1 of n-tile n0+8 .. n0+15.
template <typename T>
__device__ __forceinline__ const T* block_rows_nk(const T* tile, int ld, int n0, int k0) {
  const int lane = int(threadIdx.x) % 32;
  return tile + (n0 + lane % 8 + 8 * (lane / 16)) * ld + k0 + 8 * (lane / 8 % 2);
}

// a[kk] ← the A fragments of the warp's 16 rows r0 .. r0+15 of a shared tile, columns
// 16·kk .. 16·kk + 15.
template <typename T, int kK>
__device__ __forceinline__ void load_a_fragments(uint32_t (&a)[kK / 16][4], const T* tile, int ld,
                                                 int r0) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk) ldmatrix_x4<false>(a[kk], block_rows(tile, ld, r0, 16 * kk));
}

// acc[j] (the C tile of columns 8j .. 8j+7) += A · B over kK, B [kK, kN] held transposed in a
// shared tile: row n of `b_nk` is B's column n (e.g. K [keys, d] for Q·Kᵀ).
template <typename T, int kK, int kN>
__device__ __forceinline__ void mma_b_nk(float (&acc)[kN / 8][4], const uint32_t (&a)[kK / 16][4],
                                         const T* b_nk, int ld) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk)
#pragma unroll
    for (int j = 0; j < kN / 16; ++j) {
      uint32_t b[4];
      ldmatrix_x4<false>(b, block_rows_nk(b_nk, ld, 16 * j, 16 * kk));
      mma_m16n8k16<T>(acc[2 * j], a[kk], {b[0], b[1]});
      mma_m16n8k16<T>(acc[2 * j + 1], a[kk], {b[2], b[3]});
    }
}

// acc[j] += A · B over kK, B [kK, kN] row-major in a shared tile (e.g. V [keys, d] for P·V).
template <typename T, int kK, int kN>
__device__ __forceinline__ void mma_b_kn(float (&acc)[kN / 8][4], const uint32_t (&a)[kK / 16][4],
                                         const T* b_kn, int ld) {
#pragma unroll
  for (int kk = 0; kk < kK / 16; ++kk)
#pragma unroll
    for (int j = 0; j < kN / 16; ++j) {
      uint32_t b[4];
      ldmatrix_x4<true>(b, block_rows(b_kn, ld, 16 * kk, 16 * j));
      mma_m16n8k16<T>(acc[2 * j], a[kk], {b[0], b[1]});
      mma_m16n8k16<T>(acc[2 * j + 1], a[kk], {b[2], b[3]});
    }
}

// The accumulator tile [16, kN] as A fragments [16, kN] (each element rounded to T).
template <typename T, int kN>
__device__ __forceinline__ void to_a_fragments(const float (&c)[kN / 8][4],
                                               uint32_t (&a)[kN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
    a[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

}  // namespace megatron::kernels::cuda::mma
