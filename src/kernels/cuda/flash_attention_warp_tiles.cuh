// The fused attention's FlashAttention-2-style CUDA kernels (internal to src/kernels/cuda; the
// host side, which picks them or the shared-memory kernels of flash_attention_kernels.cuh:
// flash_attention.cu). A header of its own, like those, so that tests/simt can run them.
//
// Each block has 4 warps and owns 64 rows — queries in the forward and the dQ kernel, keys in
// the dK/dV kernel — 16 per warp. A warp keeps its rows' scores, probabilities and accumulators
// in registers as mma.sync fragments (mma_fragments.cuh): the online softmax rescales its own
// registers, and the probabilities (or dS) become the next product's A operand without touching
// shared memory. Shared memory holds only the tiles every warp reads (64 rows of K and V, or of
// Q and dout, head dimension padded to kD), and the dropout keep bytes. Tiles arrive by cp.async
// (async_copy.cuh) while the warps compute on the previous one: in the forward, V's tile while
// Q·Kᵀ runs and the next K tile during the softmax and P·V; in the backward, the second operand
// tile while the first product runs.
//
// The same contract, masks, dropout draws, roundings and determinism as the shared-memory
// kernels (flash_attention.cu describes them): the forward walks the key tiles in order; the
// backward is D = rowsum(dout ⊙ out) (row_dot_kernel), then one block per key tile owning dK and
// dV, then one block per query tile owning dQ, each summing in a fixed order without atomics.
// 16-bit operands only (bf16, f16), head dimension d <= 128, padded to kD ∈ kHeadDims.
#pragma once

#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/flash_attention_kernels.cuh"
#include "kernels/cuda/mma_fragments.cuh"

namespace megatron::kernels::cuda::flash::warp_tiles {

constexpr int kRows = 16 * kWarps;  // a block's own rows: 16 per warp
constexpr int kCols = 64;           // rows of the other side per inner tile
constexpr int kHeadDims[] = {32, 64, 96, 128};

// kD for head dimension d; 0 when d is above the largest.
constexpr int padded_head_dim(int64_t d) {
  for (int kd : kHeadDims)
    if (d <= kd) return kd;
  return 0;
}

// Leading dimension of a shared [rows, kD] tile: rows of 16-byte chunks, offset by one chunk so
// that the 8 rows an ldmatrix phase reads fall in different banks.
template <int kD>
constexpr int kLd = kD + 8;

// The shared memory of the kernels here: kTiles [64, kD] operand tiles (the forward three, the
// backward four), the lse and D of 64 query rows (backward), and the dropout keep bytes [64, 64].
template <typename T, int kD, int kTiles>
struct Smem {
  static constexpr size_t kTile = size_t(kRows) * kLd<kD> * sizeof(T);
  static constexpr size_t kRowsF32 = size_t(kCols) * sizeof(float);
  static constexpr size_t kKeep = size_t(kRows) * kCols;
  static constexpr size_t kBytes = kTiles * kTile + 2 * kRowsF32 + kKeep;
  static_assert(kRows == kCols, "tile i of either side is rows 64·i .. 64·i + 63");
  static_assert(kTile % 16 == 0 && kRowsF32 % 16 == 0, "every tile 16-byte aligned");

  __device__ static T* tile(int i) { return reinterpret_cast<T*>(flash_shared_memory + i * kTile); }
  __device__ static float* rows_f32(int i) {
    return reinterpret_cast<float*>(flash_shared_memory + kTiles * kTile + i * kRowsF32);
  }
  __device__ static uint8_t* keep() { return flash_shared_memory + kTiles * kTile + 2 * kRowsF32; }
};
template <typename T, int kD>
using ForwardSmem = Smem<T, kD, 3>;
template <typename T, int kD>
using BackwardSmem = Smem<T, kD, 4>;

// dst [64, kLd] ← rows t0 .. t0 + 63 (row t at src + row_at(t), d elements), zero past the
// sequence's end and past d. Where every row is 16-byte aligned the rows' 16-byte chunks are
// cp.async copies, which the caller commits and waits for; the rest is stored at once. Whole
// block.
template <typename T, int kD, typename RowAt>
__device__ void load_rows(const T* src, RowAt row_at, int64_t t0, int64_t s, int d, T* dst) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  const bool vector = d % 8 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  for (int e = threadIdx.x; e < kRows * kChunks; e += blockDim.x) {
    const int r = e / kChunks, c = e % kChunks * 8;
    const int64_t t = t0 + r;
    T* to = dst + r * kLd<kD> + c;
    if (vector && t < s && c < d) {
      async_copy_16(to, src + row_at(t) + c);
    } else {
      for (int k = 0; k < 8; ++k) to[k] = t < s && c + k < d ? src[row_at(t) + c + k] : T(0.0f);
    }
  }
}

// Rows t0 .. t0 + 63 of slot `slot` (a query i < q, the key q, the value q + 1) of group grp of
// batch n of qkv, and of head h of batch n of dout, into dst (load_rows).
template <typename T, int kD>
__device__ void load_qkv_rows(const T* qkv, const Geometry& g, int64_t n, int64_t grp, int64_t slot,
                              int64_t t0, T* dst) {
  load_rows<T, kD>(
      qkv, [&](int64_t t) { return g.qkv_at(t, n, grp, slot); }, t0, g.s, int(g.d), dst);
}
template <typename T, int kD>
__device__ void load_dout_rows(const T* dout, const Geometry& g, int64_t n, int64_t h, int64_t t0,
                               T* dst) {
  load_rows<T, kD>(
      dout, [&](int64_t t) { return g.out_at(t, n, h); }, t0, g.s, int(g.d), dst);
}

// keep[r][c] (r < 16, c < 64) for the warp's query rows q_first .. q_first + 15 and key tile k0:
// the dropout rows' draws (draw_keep); rows past the sequence are left as they are. One warp.
__device__ inline void draw_keep_rows(const MaskParams& m, const Geometry& g, int64_t n, int64_t h,
                                      int64_t q_first, int64_t k0, uint8_t* keep) {
  const int cols = int(min(int64_t(kCols), g.s - k0));
  for (int r = 0; r < 16 && q_first + r < g.s; ++r)
    draw_keep(m, m.rows[(n * g.heads + h) * g.s + q_first + r], k0, cols, keep + r * kCols);
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Where element e of C tile j of this lane lies in the warp's [16, 64] tile: row 0..15, col 0..63.
__device__ __forceinline__ int c_row(int e) {
  return int(threadIdx.x) % 32 / 4 + 8 * (e / 2);
}
__device__ __forceinline__ int c_col(int j, int e) {
  return 8 * j + 2 * (int(threadIdx.x) % 4) + e % 2;
}

// dst[row_at(first + r) + c] ← acc[r, c] · row_scale (rounded to T) for the warp's accumulator
// rows r below the sequence's end (row_scale[0] for rows c_row(0), [1] for c_row(2)) and its
// columns c below d.
template <typename T, int kD, typename RowAt>
__device__ void store_rows(const float (&acc)[kD / 8][4], const float (&row_scale)[2],
                           int64_t first, const Geometry& g, T* dst, RowAt row_at) {
#pragma unroll
  for (int j = 0; j < kD / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t t = first + c_row(e);
      const int col = c_col(j, e);
      if (t < g.s && col < g.d) dst[row_at(t) + col] = from_f32<T>(acc[j][e] * row_scale[e / 2]);
    }
}

// Forward: one block per (batch·head, query tile); heavier causal query tiles first.
template <typename T, int kD>
__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(const T* qkv, Geometry g, MaskParams m, float scale, T* out, float* lse) {
  using L = ForwardSmem<T, kD>;
  T* Q = L::tile(0);
  T* K = L::tile(1);
  T* V = L::tile(2);
  const int warp = int(threadIdx.x) / 32;
  uint8_t* keep = L::keep() + warp * 16 * kCols;
  const int64_t n = blockIdx.x / g.heads, h = blockIdx.x % g.heads, grp = h / g.q, i = h % g.q;
  const int64_t q0 = int64_t(gridDim.y - 1 - blockIdx.y) * kRows;
  const int64_t first = q0 + warp * 16;  // the warp's first query row
  auto load_keys = [&](int64_t k0) {
    load_qkv_rows<T, kD>(qkv, g, n, grp, g.q, k0, K);
    async_copy_commit();
  };
  load_qkv_rows<T, kD>(qkv, g, n, grp, i, q0, Q);
  load_keys(0);
  async_copy_wait<0>();
  __syncthreads();
  uint32_t qf[kD / 16][4];
  mma::load_a_fragments<T, kD>(qf, Q, kLd<kD>, warp * 16);

  float o[kD / 8][4] = {};                    // out's accumulator, rows (c_row)
  float run_max[2] = {-INFINITY, -INFINITY};  // rows c_row(0), c_row(2)
  float run_sum[2] = {0.0f, 0.0f};            // this lane's share of the undropped sum
  const int64_t tiles = key_tiles_seen(m.causal, g.s, q0, min(int64_t(kRows), g.s - q0), kCols);
  // Each key tile: K is in place (and visible) when the iteration starts; V's tile arrives while
  // Q Kᵀ runs, the next K tile during the softmax and P V.
  for (int64_t kb = 0; kb < tiles; ++kb) {
    const int64_t k0 = kb * kCols;
    load_qkv_rows<T, kD>(qkv, g, n, grp, g.q + 1, k0, V);
    async_copy_commit();
    float sc[kCols / 8][4] = {};
    mma::mma_b_nk<T, kD, kCols>(sc, qf, K, kLd<kD>);  // Q Kᵀ
    __syncthreads();                                  // every warp has read K
    if (kb + 1 < tiles) {
      load_keys(k0 + kCols);
      async_copy_wait<1>();  // V has landed; the next K may still be in flight
    } else {
      async_copy_wait<0>();
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t query = first + c_row(e), key = k0 + c_col(j, e);
        const bool masked = query >= g.s || key >= g.s || hidden(m, g.s, n, query, key);
        sc[j][e] = masked ? -INFINITY : sc[j][e] * scale;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], sc[j][e]);
      }
    if (m.dropout) draw_keep_rows(m, g, n, h, first, k0, keep);
    float rescale[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float new_max = fmaxf(run_max[r], quad_max(tile_max[r]));
      // exp(old − new) is 0 while the running max is −inf; 1 while no key has been seen.
      rescale[r] = new_max == -INFINITY ? 1.0f : expf(run_max[r] - new_max);
      run_max[r] = new_max;
      run_sum[r] *= rescale[r];
    }
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const float p = run_max[r] == -INFINITY ? 0.0f : expf(sc[j][e] - run_max[r]);
        run_sum[r] += p;
        const bool kept = !m.dropout || keep[c_row(e) * kCols + c_col(j, e)] != 0;
        sc[j][e] = m.dropout ? (kept ? p * m.keep_scale : 0.0f) : p;  // hidden: p = 0
      }
#pragma unroll
    for (int j = 0; j < kD / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[j][e] *= rescale[e / 2];
    uint32_t pf[kCols / 16][4];
    mma::to_a_fragments<T, kCols>(sc, pf);
    __syncthreads();                                 // V is visible
    mma::mma_b_kn<T, kCols, kD>(o, pf, V, kLd<kD>);  // O += P V
    async_copy_wait<0>();
    __syncthreads();  // the next K is visible; every warp has read V
  }
  float inv[2], total[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    total[r] = quad_sum(run_sum[r]);
    inv[r] = total[r] > 0.0f ? 1.0f / total[r] : 0.0f;
  }
  store_rows<T, kD>(o, inv, first, g, out, [&](int64_t t) { return g.out_at(t, n, h); });
  if (threadIdx.x % 4 == 0)
    for (int r = 0; r < 2; ++r) {
      const int64_t query = first + c_row(2 * r);
      if (query < g.s)
        lse[(n * g.heads + h) * g.s + query] =
            total[r] > 0.0f ? run_max[r] + logf(total[r]) : -INFINITY;
    }
}

// The backward's two score-shaped products for the warp's 16 rows: s = A1 B1ᵀ as soon as the
// next-to-last committed copies have landed, then dp = A2 B2ᵀ once the last (B2's tile) has too
// (A1 = K, B1 = Q, A2 = V, B2 = dout in the dK/dV kernel; Q, K, dout, V in the dQ kernel). Whole
// block: two barriers.
template <typename T, int kD>
__device__ void score_products(const T* a1, const T* b1, const T* a2, const T* b2,
                               float (&s)[kCols / 8][4], float (&dp)[kCols / 8][4]) {
  const int r0 = int(threadIdx.x) / 32 * 16;
  uint32_t af[kD / 16][4];
  async_copy_wait<1>();
  __syncthreads();
  mma::load_a_fragments<T, kD>(af, a1, kLd<kD>, r0);
  mma::mma_b_nk<T, kD, kCols>(s, af, b1, kLd<kD>);
  async_copy_wait<0>();
  __syncthreads();
  mma::load_a_fragments<T, kD>(af, a2, kLd<kD>, r0);
  mma::mma_b_nk<T, kD, kCols>(dp, af, b2, kLd<kD>);
}

// dK and dV of key tile blockIdx.y of group g of batch n (blockIdx.x = n·G + g), over the group's
// q query heads and the query tiles that see the key tile. Warp w owns keys k0 + 16w .. + 15 and
// computes the transposed products: Sᵀ = K Qᵀ, dPᵀ = V doutᵀ, dV += (P ⊙ Z)ᵀ dout, dK += dSᵀ Q.
template <typename T, int kD>
__global__ void __launch_bounds__(kBlockThreads)
    key_value_grad_kernel(const T* qkv, const T* dout, const float* lse, const float* D, Geometry g,
                          MaskParams m, float scale, T* dqkv) {
  using L = BackwardSmem<T, kD>;
  T* K = L::tile(0);
  T* V = L::tile(1);
  T* Q = L::tile(2);
  T* dO = L::tile(3);
  float* lse_rows = L::rows_f32(0);
  float* D_rows = L::rows_f32(1);
  uint8_t* keep = L::keep();  // [query row, key] of the block's 64 keys
  const int warp = int(threadIdx.x) / 32;
  const int64_t n = blockIdx.x / g.groups, grp = blockIdx.x % g.groups;
  const int64_t k0 = int64_t(blockIdx.y) * kRows, first = k0 + warp * 16;
  load_qkv_rows<T, kD>(qkv, g, n, grp, g.q, k0, K);
  load_qkv_rows<T, kD>(qkv, g, n, grp, g.q + 1, k0, V);
  float dk[kD / 8][4] = {}, dv[kD / 8][4] = {};
  for (int64_t i = 0; i < g.q; ++i) {
    const int64_t h = grp * g.q + i;
    // Causal: the query tiles that end before this key tile see none of it.
    for (int64_t q0 = m.causal ? k0 : 0; q0 < g.s; q0 += kCols) {
      __syncthreads();  // every warp has read the previous Q, dout, lse, D and keep
      load_qkv_rows<T, kD>(qkv, g, n, grp, i, q0, Q);
      async_copy_commit();
      load_dout_rows<T, kD>(dout, g, n, h, q0, dO);
      async_copy_commit();
      for (int r = threadIdx.x; r < kCols; r += blockDim.x) {
        const bool valid = q0 + r < g.s;
        lse_rows[r] = valid ? lse[(n * g.heads + h) * g.s + q0 + r] : -INFINITY;
        D_rows[r] = valid ? D[(n * g.heads + h) * g.s + q0 + r] : 0.0f;
      }
      // Warp w draws query rows 16w .. 16w + 15 of the tile for all 64 keys.
      if (m.dropout) draw_keep_rows(m, g, n, h, q0 + warp * 16, k0, keep + warp * 16 * kCols);
      float st[kCols / 8][4] = {}, dpt[kCols / 8][4] = {};
      score_products<T, kD>(K, Q, V, dO, st, dpt);  // K Qᵀ, then V doutᵀ once dout has landed
#pragma unroll
      for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = c_col(j, e);
          const int64_t key = first + c_row(e), query = q0 + c;
          const float l = lse_rows[c];
          const bool live = l != -INFINITY && key < g.s && !hidden(m, g.s, n, query, key);
          const float prob = live ? expf(st[j][e] * scale - l) : 0.0f;
          const float z =
              m.dropout ? (live && keep[c * kCols + warp * 16 + c_row(e)] ? m.keep_scale : 0.0f)
                        : 1.0f;
          st[j][e] = prob * z;
          dpt[j][e] = live ? scale * prob * (dpt[j][e] * z - D_rows[c]) : 0.0f;
        }
      uint32_t pf[kCols / 16][4];
      mma::to_a_fragments<T, kCols>(st, pf);
      mma::mma_b_kn<T, kCols, kD>(dv, pf, dO, kLd<kD>);  // dV += (P ⊙ Z)ᵀ dout
      mma::to_a_fragments<T, kCols>(dpt, pf);
      mma::mma_b_kn<T, kCols, kD>(dk, pf, Q, kLd<kD>);  // dK += dSᵀ Q
    }
  }
  constexpr float kOnes[2] = {1.0f, 1.0f};
  store_rows<T, kD>(dk, kOnes, first, g, dqkv, [&](int64_t t) { return g.qkv_at(t, n, grp, g.q); });
  store_rows<T, kD>(dv, kOnes, first, g, dqkv,
                    [&](int64_t t) { return g.qkv_at(t, n, grp, g.q + 1); });
}

// dQ of query tile blockIdx.y of head h of batch n (blockIdx.x = n·H + h), over the key tiles the
// query tile sees; heavier causal query tiles first. Warp w owns queries q0 + 16w .. + 15.
template <typename T, int kD>
__global__ void __launch_bounds__(kBlockThreads)
    query_grad_kernel(const T* qkv, const T* dout, const float* lse, const float* D, Geometry g,
                      MaskParams m, float scale, T* dqkv) {
  using L = BackwardSmem<T, kD>;
  T* Q = L::tile(0);
  T* dO = L::tile(1);
  T* K = L::tile(2);
  T* V = L::tile(3);
  const int warp = int(threadIdx.x) / 32;
  uint8_t* keep = L::keep() + warp * 16 * kCols;
  const int64_t n = blockIdx.x / g.heads, h = blockIdx.x % g.heads, grp = h / g.q, i = h % g.q;
  const int64_t q0 = int64_t(gridDim.y - 1 - blockIdx.y) * kRows, first = q0 + warp * 16;
  load_qkv_rows<T, kD>(qkv, g, n, grp, i, q0, Q);
  load_dout_rows<T, kD>(dout, g, n, h, q0, dO);
  float l[2], Dr[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t query = first + c_row(2 * r);
    l[r] = query < g.s ? lse[(n * g.heads + h) * g.s + query] : -INFINITY;
    Dr[r] = query < g.s ? D[(n * g.heads + h) * g.s + query] : 0.0f;
  }
  float dq[kD / 8][4] = {};
  const int64_t tiles = key_tiles_seen(m.causal, g.s, q0, min(int64_t(kRows), g.s - q0), kCols);
  for (int64_t kb = 0; kb < tiles; ++kb) {
    const int64_t k0 = kb * kCols;
    __syncthreads();  // every warp has read the previous K and V
    load_qkv_rows<T, kD>(qkv, g, n, grp, g.q, k0, K);
    async_copy_commit();
    load_qkv_rows<T, kD>(qkv, g, n, grp, g.q + 1, k0, V);
    async_copy_commit();
    if (m.dropout) draw_keep_rows(m, g, n, h, first, k0, keep);
    float sc[kCols / 8][4] = {}, dp[kCols / 8][4] = {};
    score_products<T, kD>(Q, K, dO, V, sc, dp);  // Q Kᵀ, then dout Vᵀ once V has landed
#pragma unroll
    for (int j = 0; j < kCols / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e / 2;
        const int64_t query = first + c_row(e), key = k0 + c_col(j, e);
        const bool live = l[r] != -INFINITY && key < g.s && !hidden(m, g.s, n, query, key);
        const float prob = live ? expf(sc[j][e] * scale - l[r]) : 0.0f;
        const float z =
            m.dropout ? (live && keep[c_row(e) * kCols + c_col(j, e)] ? m.keep_scale : 0.0f) : 1.0f;
        dp[j][e] = live ? scale * prob * (dp[j][e] * z - Dr[r]) : 0.0f;
      }
    uint32_t sf[kCols / 16][4];
    mma::to_a_fragments<T, kCols>(dp, sf);
    mma::mma_b_kn<T, kCols, kD>(dq, sf, K, kLd<kD>);  // dQ += dS K
  }
  constexpr float kOnes[2] = {1.0f, 1.0f};
  store_rows<T, kD>(dq, kOnes, first, g, dqkv, [&](int64_t t) { return g.qkv_at(t, n, grp, i); });
}

// ---- Host side --------------------------------------------------------------------------------

template <typename T, int kD>
LaunchShape forward_launch(const Geometry& g) {
  return {dim3(unsigned(g.b * g.heads), tiles_of(g.s, kRows)), ForwardSmem<T, kD>::kBytes};
}
template <typename T, int kD>
LaunchShape key_value_grad_launch(const Geometry& g) {
  return {dim3(unsigned(g.b * g.groups), tiles_of(g.s, kRows)), BackwardSmem<T, kD>::kBytes};
}
template <typename T, int kD>
LaunchShape query_grad_launch(const Geometry& g) {
  return {dim3(unsigned(g.b * g.heads), tiles_of(g.s, kRows)), BackwardSmem<T, kD>::kBytes};
}

}  // namespace megatron::kernels::cuda::flash::warp_tiles
