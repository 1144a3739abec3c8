// The fused attention's CUDA kernels (internal to src/kernels/cuda; the host side and the
// contract's description: flash_attention.cu). A header of its own so that
// tests/simt/flash_attention_simt_test.cpp can call these kernels at every tile size under the
// SIMT emulator: everything here is device code and plain data.
#pragma once

#include <mma.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/philox.cuh"
#include "kernels/cuda/warp_reduce.cuh"
#include "kernels/dropout.h"
#include "kernels/flash_attention.h"

namespace megatron::kernels::cuda::flash {

// The block's dynamic shared memory; every kernel carves it with its *Smem layout. (The SIMT
// emulator of tests/simt has no `extern __shared__`: it hands out its own buffer.)
#ifdef MEGATRON_SIMT
#define flash_shared_memory (::megatron::simt::dynamic_shared_memory())
#else
extern __shared__ __align__(128) unsigned char flash_shared_memory[];
#endif

constexpr int kWarps = 4;
constexpr int kBlockThreads = 32 * kWarps;

// Sizes of qkv [s, b, G, q + 2, d] and out [s, b, H·d], H = G·q; dp = d rounded up to 16.
struct Geometry {
  int64_t s, b, groups, q, d, heads;
  int dp;
  __host__ __device__ int64_t qkv_at(int64_t t, int64_t n, int64_t g, int64_t slot) const {
    return (((t * b + n) * groups + g) * (q + 2) + slot) * d;
  }
  __host__ __device__ int64_t out_at(int64_t t, int64_t n, int64_t h) const {
    return ((t * b + n) * heads + h) * d;
  }
};

// What hides an element and what dropout keeps (the CPU twin's TileMask).
struct MaskParams {
  const uint8_t* pad;  // device [b, s], 1 = padding key; null: none
  bool causal;
  bool dropout;
  float keep_scale;    // 1 / (1 − p), the CPU's expression
  uint32_t threshold;  // dropout_keep_threshold(p)
  uint64_t seed;
  const MaskRow* rows;  // device [b·H·s]: row (n, h, t); null without dropout
};

// Leading dimensions (in elements) of the shared-memory tiles. 16-bit operands: a multiple of 8
// (WMMA's rule), offset by 8 so that consecutive rows start in different banks; f32 operands
// (read element by element): odd, so a column walk is free of bank conflicts. f32 accumulators:
// a multiple of 4 (WMMA's rule for stores), offset by 4.
template <typename T>
__host__ __device__ constexpr int operand_ld(int cols) {
  return std::is_same_v<T, float> ? cols + 1 : cols + 8;
}
__host__ __device__ constexpr int accumulator_ld(int cols) {
  return cols + 4;
}

// Byte offsets of one kernel's shared-memory buffers, taken in order, each 128-byte aligned
// (WMMA wants 32).
struct SmemCarver {
  size_t used = 0;
  __host__ __device__ size_t take(size_t bytes) {
    const size_t at = used;
    used = (used + bytes + 127) / 128 * 128;
    return at;
  }
};

// Forward: Q, K, V [tile, ld] T; S [tile, tile + 4] f32; P [tile, ldp] T; O [tile, dp + 4] f32;
// running max and sum [tile] f32; keep [kWarps, tile] u8 (one row per warp).
template <typename T>
struct ForwardSmem {
  size_t q, k, v, s, p, o, max, sum, keep, bytes;
  __host__ __device__ ForwardSmem(int tile, int dp) {
    SmemCarver c;
    const size_t operand = size_t(tile) * operand_ld<T>(dp) * sizeof(T);
    q = c.take(operand);
    k = c.take(operand);
    v = c.take(operand);
    s = c.take(size_t(tile) * accumulator_ld(tile) * sizeof(float));
    p = c.take(size_t(tile) * operand_ld<T>(tile) * sizeof(T));
    o = c.take(size_t(tile) * accumulator_ld(dp) * sizeof(float));
    max = c.take(size_t(tile) * sizeof(float));
    sum = c.take(size_t(tile) * sizeof(float));
    keep = c.take(size_t(kWarps) * tile);
    bytes = c.used;
  }
};

// Backward (both gradient kernels): Q, dout, K, V [tile, ld] T; S (then P) and dP
// [tile, tile + 4] f32; Pd and dS [tile, ldp] T; two f32 accumulators [tile, dp + 4] (dK and dV,
// or dQ and an unused one); lse and D of the query rows [tile] f32; keep [kWarps, tile] u8.
template <typename T>
struct BackwardSmem {
  size_t q, dout, k, v, s, dp, pd, ds, acc0, acc1, lse, D, keep, bytes;
  __host__ __device__ BackwardSmem(int tile, int head_dp, bool two_accumulators) {
    SmemCarver c;
    const size_t operand = size_t(tile) * operand_ld<T>(head_dp) * sizeof(T);
    const size_t scores = size_t(tile) * accumulator_ld(tile) * sizeof(float);
    const size_t probs = size_t(tile) * operand_ld<T>(tile) * sizeof(T);
    const size_t acc = size_t(tile) * accumulator_ld(head_dp) * sizeof(float);
    q = c.take(operand);
    dout = c.take(operand);
    k = c.take(operand);
    v = c.take(operand);
    s = c.take(scores);
    dp = c.take(scores);
    pd = c.take(probs);
    ds = c.take(probs);
    acc0 = c.take(acc);
    acc1 = two_accumulators ? c.take(acc) : acc0;
    lse = c.take(size_t(tile) * sizeof(float));
    D = c.take(size_t(tile) * sizeof(float));
    keep = c.take(size_t(kWarps) * tile);
    bytes = c.used;
  }
};

template <typename Buffer>
__device__ __forceinline__ Buffer* at(unsigned char* smem, size_t offset) {
  return reinterpret_cast<Buffer*>(smem + offset);
}

// dst [tile, ld] ← rows t0 .. t0 + tile of the tensor (row t at src + row_at(t), d elements),
// zero past the sequence's end (t >= s) and past d. Called by the whole block.
template <typename T, typename RowAt>
__device__ void load_tile(const T* src, RowAt row_at, int64_t t0, int64_t s, int d, int dp,
                          int tile, T* dst) {
  const int ld = operand_ld<T>(dp);
  for (int e = threadIdx.x; e < tile * dp; e += blockDim.x) {
    const int r = e / dp, k = e - r * dp;
    dst[r * ld + k] = t0 + r < s && k < d ? src[row_at(t0 + r) + k] : T(0.0f);
  }
}

// c [M, N] f32 (row-major, ldc) (+)= A [M, K] · B [K, N], every operand in shared memory.
// A(m, k) = a[m·lda + k], or a[k·lda + m] with kATransposed; B(k, n) = b[k·ldb + n], or
// b[n·ldb + k] with kBTransposed. M, N, K are multiples of 16. Called by the whole block; the
// caller synchronises before anyone reads c. Each output element is one warp's (tensor cores)
// or one thread's (f32) and sums its K terms in a fixed order: deterministic.
template <typename T, bool kATransposed, bool kBTransposed>
__device__ void block_product(const T* a, int lda, const T* b, int ldb, float* c, int ldc, int M,
                              int N, int K, bool accumulate) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  constexpr bool kTensorCores = !std::is_same_v<T, float>;
#else
  constexpr bool kTensorCores = false;  // bf16 WMMA needs sm_80
#endif
  if constexpr (kTensorCores) {
    namespace wmma = nvcuda::wmma;
    using ALayout = std::conditional_t<kATransposed, wmma::col_major, wmma::row_major>;
    using BLayout = std::conditional_t<kBTransposed, wmma::col_major, wmma::row_major>;
    const int warp = int(threadIdx.x) / 32, tiles_n = N / 16;
    for (int t = warp; t < (M / 16) * tiles_n; t += kWarps) {
      const int m0 = t / tiles_n * 16, n0 = t % tiles_n * 16;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      if (accumulate)
        wmma::load_matrix_sync(acc, c + m0 * ldc + n0, ldc, wmma::mem_row_major);
      else
        wmma::fill_fragment(acc, 0.0f);
      for (int k0 = 0; k0 < K; k0 += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, ALayout> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BLayout> fb;
        wmma::load_matrix_sync(fa, kATransposed ? a + k0 * lda + m0 : a + m0 * lda + k0, lda);
        wmma::load_matrix_sync(fb, kBTransposed ? b + n0 * ldb + k0 : b + k0 * ldb + n0, ldb);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(c + m0 * ldc + n0, acc, ldc, wmma::mem_row_major);
    }
  } else {
    for (int e = threadIdx.x; e < M * N; e += blockDim.x) {
      const int m = e / N, n = e - m * N;
      float sum = 0.0f;
      for (int k = 0; k < K; ++k)
        sum += to_f32(kATransposed ? a[k * lda + m] : a[m * lda + k]) *
               to_f32(kBTransposed ? b[n * ldb + k] : b[k * ldb + n]);
      c[m * ldc + n] = accumulate ? c[m * ldc + n] + sum : sum;
    }
  }
}

// keep[c] for the columns c < cols of key tile k0 of the dropout row `row` (draws
// row.counter_base + k0 + c, the CPU's draw_keep_row). Called by one warp.
__device__ inline void draw_keep(const MaskParams& m, const MaskRow& row, int64_t k0, int cols,
                                 uint8_t* keep) {
  const int lane = int(threadIdx.x) % 32;
  const uint64_t base = row.counter_base + uint64_t(k0);
  for (int64_t kb = lane; kb < dropout_blocks_per_row(cols); kb += 32)
    dropout_mask_block(m.seed, row.key, base, kb, cols, m.threshold, keep);
  __syncwarp();
}

// True when the causal or the padding mask hides key `key` from query `query` of batch n.
__device__ __forceinline__ bool hidden(const MaskParams& m, int64_t s, int64_t n, int64_t query,
                                       int64_t key) {
  return (m.causal && key > query) || (m.pad != nullptr && m.pad[n * s + key] != 0);
}

// The key tiles query tile [q0, q0 + rows) sees: all, or with the causal mask those that start
// at or before its last query (the CPU twin's key_blocks_seen).
__device__ __forceinline__ int64_t key_tiles_seen(bool causal, int64_t s, int64_t q0, int64_t rows,
                                                  int tile) {
  const int64_t all = (s + tile - 1) / tile;
  return causal ? min(all, (q0 + rows - 1) / tile + 1) : all;
}

// K and V of key tile k0 of group grp of batch n (K, V [tile, ld]). Called by the whole block.
template <typename T>
__device__ void load_keys_values(const T* qkv, const Geometry& g, int tile, int64_t n, int64_t grp,
                                 int64_t k0, T* K, T* V) {
  load_tile(
      qkv, [&](int64_t t) { return g.qkv_at(t, n, grp, g.q); }, k0, g.s, int(g.d), g.dp, tile, K);
  load_tile(
      qkv, [&](int64_t t) { return g.qkv_at(t, n, grp, g.q + 1); }, k0, g.s, int(g.d), g.dp, tile,
      V);
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(const T* qkv, Geometry g, MaskParams m, float scale, T* out, float* lse,
                   int tile) {
  unsigned char* smem = flash_shared_memory;
  const ForwardSmem<T> L(tile, g.dp);
  T* Q = at<T>(smem, L.q);
  T* K = at<T>(smem, L.k);
  T* V = at<T>(smem, L.v);
  float* S = at<float>(smem, L.s);
  T* P = at<T>(smem, L.p);
  float* O = at<float>(smem, L.o);
  float* run_max = at<float>(smem, L.max);
  float* run_sum = at<float>(smem, L.sum);
  const int ld = operand_ld<T>(g.dp), lds = accumulator_ld(tile), ldp = operand_ld<T>(tile),
            ldo = accumulator_ld(g.dp);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  uint8_t* keep = at<uint8_t>(smem, L.keep) + warp * tile;

  const int64_t n = blockIdx.x / g.heads, h = blockIdx.x % g.heads, grp = h / g.q, i = h % g.q;
  const int64_t q0 = int64_t(blockIdx.y) * tile, rows = min(int64_t(tile), g.s - q0);
  load_tile(
      qkv, [&](int64_t t) { return g.qkv_at(t, n, grp, i); }, q0, g.s, int(g.d), g.dp, tile, Q);
  for (int e = threadIdx.x; e < tile * ldo; e += blockDim.x) O[e] = 0.0f;
  for (int r = threadIdx.x; r < tile; r += blockDim.x) {
    run_max[r] = -INFINITY;
    run_sum[r] = 0.0f;
  }
  for (int64_t kb = 0; kb < key_tiles_seen(m.causal, g.s, q0, rows, tile); ++kb) {
    const int64_t k0 = kb * tile;
    const int cols = int(min(int64_t(tile), g.s - k0));
    __syncthreads();  // the previous tile's product has read K, V and P
    load_keys_values(qkv, g, tile, n, grp, k0, K, V);
    __syncthreads();
    block_product<T, false, true>(Q, ld, K, ld, S, lds, tile, tile, g.dp, false);  // Q Kᵀ
    __syncthreads();
    // Online softmax, one warp per query row: new running max, rescale of the row's accumulator,
    // and P = exp(scaled score − max), dropped, in the operand dtype (0 where hidden).
    for (int r = warp; r < tile; r += kWarps) {
      float* sr = S + r * lds;
      T* pr = P + r * ldp;
      const int64_t query = q0 + r;
      float tile_max = -INFINITY;
      if (r < rows) {
        for (int c = lane; c < tile; c += 32) {
          const bool masked = c >= cols || hidden(m, g.s, n, query, k0 + c);
          const float v = masked ? -INFINITY : sr[c] * scale;
          sr[c] = v;
          tile_max = fmaxf(tile_max, v);
        }
        tile_max = warp_max(tile_max);
      }
      const float old_max = r < rows ? run_max[r] : -INFINITY;
      const float new_max = fmaxf(old_max, tile_max);
      if (new_max == -INFINITY) {  // past the sequence, or every key so far hidden: add nothing
        for (int c = lane; c < tile; c += 32) pr[c] = T(0.0f);
        continue;
      }
      if (m.dropout) draw_keep(m, m.rows[(n * g.heads + h) * g.s + query], k0, cols, keep);
      const float rescale = expf(old_max - new_max);  // 0 while the running max is −inf
      float sum = 0.0f;
      for (int c = lane; c < tile; c += 32) {
        const float e = expf(sr[c] - new_max);  // hidden: exp(−inf) = 0
        sum += e;
        const float dropped = m.dropout ? (c < cols && keep[c] ? e * m.keep_scale : 0.0f) : e;
        pr[c] = from_f32<T>(dropped);
      }
      sum = warp_sum(sum);
      float* orow = O + r * ldo;
      for (int k = lane; k < g.dp; k += 32) orow[k] *= rescale;
      __syncwarp();  // every lane has read run_max before lane 0 moves it
      if (lane == 0) {
        run_sum[r] = run_sum[r] * rescale + sum;
        run_max[r] = new_max;
      }
      __syncwarp();  // keep is rewritten by the warp's next row
    }
    __syncthreads();
    block_product<T, false, false>(P, ldp, V, ld, O, ldo, tile, g.dp, tile, true);  // O += P V
  }
  __syncthreads();
  for (int r = warp; r < rows; r += kWarps) {
    const float l = run_sum[r];
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    T* orow = out + g.out_at(q0 + r, n, h);
    for (int k = lane; k < g.d; k += 32) orow[k] = from_f32<T>(O[r * ldo + k] * inv);
    if (lane == 0)
      lse[(n * g.heads + h) * g.s + q0 + r] = l > 0.0f ? run_max[r] + logf(l) : -INFINITY;
  }
}

// D[n, h, t] = Σ_k dout · out (the softmax backward's row term; with dropout, Σ_c P ⊙ Z ⊙
// (dout·v_c) = dout · out). One warp per row, lanes over d, a butterfly sum: deterministic.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    row_dot_kernel(const T* out, const T* dout, Geometry g, float* D) {
  const int lane = int(threadIdx.x) % 32;
  const int64_t rows = g.b * g.heads * g.s;
  for (int64_t row = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32; row < rows;
       row += int64_t(gridDim.x) * kWarps) {
    const int64_t n = row / (g.heads * g.s), h = row / g.s % g.heads, t = row % g.s;
    const T* o = out + g.out_at(t, n, h);
    const T* dy = dout + g.out_at(t, n, h);
    float sum = 0.0f;
    for (int k = lane; k < g.d; k += 32) sum += to_f32(dy[k]) * to_f32(o[k]);
    sum = warp_sum(sum);
    if (lane == 0) D[row] = sum;
  }
}

// The backward kernels' shared memory (BackwardSmem), and what both load into it.
template <typename T>
struct BackwardTiles {
  __device__ BackwardTiles(const Geometry& g, int tile, bool two_accumulators)
      : L(tile, g.dp, two_accumulators) {
    unsigned char* smem = flash_shared_memory;
    Q = at<T>(smem, L.q);
    dO = at<T>(smem, L.dout);
    K = at<T>(smem, L.k);
    V = at<T>(smem, L.v);
    pd = at<T>(smem, L.pd);
    ds = at<T>(smem, L.ds);
    S = at<float>(smem, L.s);
    dP = at<float>(smem, L.dp);
    acc0 = at<float>(smem, L.acc0);
    acc1 = at<float>(smem, L.acc1);
    lse_rows = at<float>(smem, L.lse);
    D_rows = at<float>(smem, L.D);
    keep = at<uint8_t>(smem, L.keep);
  }

  // Q, dout, lse and D of query tile q0 of head h (query slot i of group grp) of batch n; rows
  // past the sequence get lse −inf (no probabilities) and D 0. Called by the whole block.
  __device__ void load_queries(const T* qkv, const T* dout, const float* lse, const float* D,
                               const Geometry& g, int tile, int64_t n, int64_t grp, int64_t i,
                               int64_t q0) {
    const int64_t h = grp * g.q + i;
    load_tile(
        qkv, [&](int64_t t) { return g.qkv_at(t, n, grp, i); }, q0, g.s, int(g.d), g.dp, tile, Q);
    load_tile(
        dout, [&](int64_t t) { return g.out_at(t, n, h); }, q0, g.s, int(g.d), g.dp, tile, dO);
    for (int r = threadIdx.x; r < tile; r += blockDim.x) {
      const bool valid = q0 + r < g.s;
      lse_rows[r] = valid ? lse[(n * g.heads + h) * g.s + q0 + r] : -INFINITY;
      D_rows[r] = valid ? D[(n * g.heads + h) * g.s + q0 + r] : 0.0f;
    }
  }

  BackwardSmem<T> L;
  T *Q, *dO, *K, *V, *pd, *ds;
  float *S, *dP, *acc0, *acc1, *lse_rows, *D_rows;
  uint8_t* keep;
};

// One (query tile q0 of head h, key tile k0) of the backward, from the tiles' Q, dout, K, V, lse
// and D: S ← P = exp(scale·QKᵀ − lse) (0 where hidden, past the sequence, or on rows whose every
// key is hidden), dP = dout·Vᵀ, then Pd = P ⊙ Z (with_pd) and dS = scale · P ⊙ (dP ⊙ Z − D) in
// the operand dtype. Called by the whole block; ends synchronised.
template <typename T>
__device__ void gradient_tile(const Geometry& g, const MaskParams& m, float scale, int tile,
                              int64_t n, int64_t h, int64_t q0, int64_t k0, BackwardTiles<T>& b,
                              bool with_pd) {
  const int ld = operand_ld<T>(g.dp), lds = accumulator_ld(tile), ldp = operand_ld<T>(tile);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t rows = min(int64_t(tile), g.s - q0);
  const int cols = int(min(int64_t(tile), g.s - k0));
  block_product<T, false, true>(b.Q, ld, b.K, ld, b.S, lds, tile, tile, g.dp, false);    // Q Kᵀ
  block_product<T, false, true>(b.dO, ld, b.V, ld, b.dP, lds, tile, tile, g.dp, false);  // dout Vᵀ
  __syncthreads();
  for (int r = warp; r < tile; r += kWarps) {
    const int64_t query = q0 + r;
    const float l = r < rows ? b.lse_rows[r] : -INFINITY;
    uint8_t* keep_row = b.keep + warp * tile;
    if (m.dropout && l != -INFINITY)
      draw_keep(m, m.rows[(n * g.heads + h) * g.s + query], k0, cols, keep_row);
    for (int c = lane; c < tile; c += 32) {
      const bool live = l != -INFINITY && c < cols && !hidden(m, g.s, n, query, k0 + c);
      const float prob = live ? expf(b.S[r * lds + c] * scale - l) : 0.0f;
      const float z = m.dropout ? (live && keep_row[c] ? m.keep_scale : 0.0f) : 1.0f;
      if (with_pd) b.pd[r * ldp + c] = from_f32<T>(prob * z);
      b.ds[r * ldp + c] =
          from_f32<T>(live ? scale * prob * (b.dP[r * lds + c] * z - b.D_rows[r]) : 0.0f);
    }
    __syncwarp();  // keep_row is rewritten by the warp's next row
  }
  __syncthreads();
}

// dK and dV of key tile blockIdx.y of group g of batch n (blockIdx.x = n·G + g), over the
// group's q query heads and the query tiles that see the key tile.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    key_value_grad_kernel(const T* qkv, const T* dout, const float* lse, const float* D, Geometry g,
                          MaskParams m, float scale, T* dqkv, int tile) {
  BackwardTiles<T> b(g, tile, true);
  float* dK = b.acc0;
  float* dV = b.acc1;
  const int ld = operand_ld<T>(g.dp), ldp = operand_ld<T>(tile), ldo = accumulator_ld(g.dp);
  const int64_t n = blockIdx.x / g.groups, grp = blockIdx.x % g.groups;
  const int64_t k0 = int64_t(blockIdx.y) * tile;
  load_keys_values(qkv, g, tile, n, grp, k0, b.K, b.V);
  for (int e = threadIdx.x; e < tile * ldo; e += blockDim.x) dK[e] = dV[e] = 0.0f;
  for (int64_t i = 0; i < g.q; ++i) {
    // Causal: the query tiles that end before this key tile see none of it.
    for (int64_t q0 = m.causal ? k0 : 0; q0 < g.s; q0 += tile) {
      __syncthreads();  // the previous products have read Q, dout, Pd and dS
      b.load_queries(qkv, dout, lse, D, g, tile, n, grp, i, q0);
      __syncthreads();
      gradient_tile(g, m, scale, tile, n, grp * g.q + i, q0, k0, b, true);
      // dV += Pdᵀ dout, dK += dSᵀ Q (transposed operands: strides swapped).
      block_product<T, true, false>(b.pd, ldp, b.dO, ld, dV, ldo, tile, g.dp, tile, true);
      block_product<T, true, false>(b.ds, ldp, b.Q, ld, dK, ldo, tile, g.dp, tile, true);
    }
  }
  __syncthreads();
  const int64_t cols = min(int64_t(tile), g.s - k0);
  for (int e = threadIdx.x; e < cols * g.d; e += blockDim.x) {
    const int c = e / int(g.d), k = e - c * int(g.d);
    dqkv[g.qkv_at(k0 + c, n, grp, g.q) + k] = from_f32<T>(dK[c * ldo + k]);
    dqkv[g.qkv_at(k0 + c, n, grp, g.q + 1) + k] = from_f32<T>(dV[c * ldo + k]);
  }
}

// dQ of query tile blockIdx.y of head h of batch n (blockIdx.x = n·H + h), over the key tiles the
// query tile sees.
template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    query_grad_kernel(const T* qkv, const T* dout, const float* lse, const float* D, Geometry g,
                      MaskParams m, float scale, T* dqkv, int tile) {
  BackwardTiles<T> b(g, tile, false);
  float* dQ = b.acc0;
  const int ld = operand_ld<T>(g.dp), ldp = operand_ld<T>(tile), ldo = accumulator_ld(g.dp);
  const int64_t n = blockIdx.x / g.heads, h = blockIdx.x % g.heads, grp = h / g.q, i = h % g.q;
  const int64_t q0 = int64_t(blockIdx.y) * tile, rows = min(int64_t(tile), g.s - q0);
  b.load_queries(qkv, dout, lse, D, g, tile, n, grp, i, q0);
  for (int e = threadIdx.x; e < tile * ldo; e += blockDim.x) dQ[e] = 0.0f;
  for (int64_t kb = 0; kb < key_tiles_seen(m.causal, g.s, q0, rows, tile); ++kb) {
    __syncthreads();  // the previous product has read K and dS
    load_keys_values(qkv, g, tile, n, grp, kb * tile, b.K, b.V);
    __syncthreads();
    gradient_tile(g, m, scale, tile, n, h, q0, kb * tile, b, false);
    block_product<T, false, false>(b.ds, ldp, b.K, ld, dQ, ldo, tile, g.dp, tile, true);  // dS K
  }
  __syncthreads();
  for (int e = threadIdx.x; e < rows * g.d; e += blockDim.x) {
    const int r = e / int(g.d), k = e - r * int(g.d);
    dqkv[g.qkv_at(q0 + r, n, grp, i) + k] = from_f32<T>(dQ[r * ldo + k]);
  }
}

// ---- Host side: what a launch needs (flash_attention.cu, and the SIMT test) -------------------

inline Geometry make_geometry(const Tensor& qkv, int64_t queries) {
  Geometry g{qkv.size(0), qkv.size(1), qkv.size(2), queries, qkv.size(4), qkv.size(2) * queries, 0};
  g.dp = int((g.d + 15) / 16 * 16);
  return g;
}

// The masks' parameters; `rows` holds the dropout mask rows where the kernels read them (null
// without dropout), and the pad mask is read where params.pad_mask lives.
inline MaskParams make_mask_params(const FlashAttentionParams& p, const MaskRow* rows) {
  MaskParams m{};
  m.pad = p.pad_mask.defined() ? static_cast<const uint8_t*>(p.pad_mask.raw_data()) : nullptr;
  m.causal = p.causal;
  m.dropout = p.dropout_p > 0.0f;
  if (m.dropout) {
    m.keep_scale = 1.0f / (1.0f - p.dropout_p);
    m.threshold = dropout_keep_threshold(p.dropout_p);
    m.seed = p.seed;
    m.rows = rows;
  }
  return m;
}

// Grid and dynamic shared memory of each kernel at a tile size.
struct LaunchShape {
  dim3 grid;
  size_t shared_bytes;
};
inline unsigned tiles_of(int64_t s, int tile) {
  return unsigned((s + tile - 1) / tile);
}
template <typename T>
LaunchShape forward_launch(const Geometry& g, int tile) {
  return {dim3(unsigned(g.b * g.heads), tiles_of(g.s, tile)), ForwardSmem<T>(tile, g.dp).bytes};
}
inline LaunchShape row_dot_launch(const Geometry& g) {
  return {dim3(blocks_for(g.b * g.heads * g.s, kWarps)), 0};
}
template <typename T>
LaunchShape key_value_grad_launch(const Geometry& g, int tile) {
  return {dim3(unsigned(g.b * g.groups), tiles_of(g.s, tile)),
          BackwardSmem<T>(tile, g.dp, true).bytes};
}
template <typename T>
LaunchShape query_grad_launch(const Geometry& g, int tile) {
  return {dim3(unsigned(g.b * g.heads), tiles_of(g.s, tile)),
          BackwardSmem<T>(tile, g.dp, false).bytes};
}

}  // namespace megatron::kernels::cuda::flash
