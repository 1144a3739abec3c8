// Fused attention on CPU (contract: kernels/flash_attention.h, checked by
// kernels/flash_attention.cpp).
//
// Tiles of kBlock queries × kBlock keys, copied to f32 scratch (K also transposed, so every
// inner loop runs over a contiguous row and vectorises). Forward: one task per (batch, head,
// query block), its key blocks in order with an online softmax (running max m, running sum l
// of the undropped probabilities, accumulator of the dropped ones times V). Backward
// (FlashAttention-2's): D = rowsum(dout ⊙ out) per query, then one task per (batch, KV group),
// which owns its keys' and values' gradients and its query heads' (accumulated in f32 over the
// key blocks), so nothing is shared between threads and the summation order is fixed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/dropout_draws.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels::cpu {

namespace {

constexpr int64_t kBlock = 64;  // queries and keys per tile
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Sizes of qkv [s, b, G, q + 2, d] and out [s, b, H·d], H = G·q.
struct Dims {
  int64_t s, b, groups, q, d, heads;
  Dims(const Tensor& qkv, int64_t queries)
      : s(qkv.size(0)),
        b(qkv.size(1)),
        groups(qkv.size(2)),
        q(queries),
        d(qkv.size(4)),
        heads(qkv.size(2) * queries) {}
  // Element offset of slot `slot` (query i < q, key q, value q + 1) of group g, position t,
  // batch n in qkv.
  int64_t qkv_at(int64_t t, int64_t n, int64_t g, int64_t slot) const {
    return (((t * b + n) * groups + g) * (q + 2) + slot) * d;
  }
  // Element offset of head h, position t, batch n in out / dout.
  int64_t out_at(int64_t t, int64_t n, int64_t h) const { return ((t * b + n) * heads + h) * d; }
};

// rows [t0, t0 + rows) of `src` (row t at src + at(t)) → dst [rows, d] f32.
template <typename T, typename At>
void load_rows(const T* src, At at, int64_t t0, int64_t rows, int64_t d, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = src + at(t0 + r);
#pragma omp simd
    for (int64_t k = 0; k < d; ++k) dst[r * d + k] = to_f32(row[k]);
  }
}

// The same rows transposed: dst [d, kBlock], column r = row t0 + r.
template <typename T, typename At>
void load_rows_transposed(const T* src, At at, int64_t t0, int64_t rows, int64_t d, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = src + at(t0 + r);
    for (int64_t k = 0; k < d; ++k) dst[k * kBlock + r] = to_f32(row[k]);
  }
}

// The tiles' products, c[i, j] (+)= alpha · Σ_k a(i, k) · b[k·ldb + j] for i < rows, j < n,
// with a(i, k) = a[i·a_row + k·a_col] (any strides: a transposed tile is just other strides).
// Register-blocked: a block of kRegRows × kRegCols accumulators stays in vector registers over
// the whole depth (16 zmm with AVX-512, 12 ymm with AVX2), fed by one row of b and kRegRows
// broadcasts per step; edges take the same loop with shorter bounds.
#ifdef __AVX512F__
constexpr int64_t kRegRows = 4, kRegCols = 64;
#else
constexpr int64_t kRegRows = 3, kRegCols = 32;
#endif

// kFull: a whole kRegRows x kRegCols block, whose loops carry no edge tests, so that the
// compiler keeps the accumulators in registers (with the tests it spilled them).
template <int64_t Rows, int64_t Cols, bool kFull>
inline void product_block(const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                          float* c, int64_t ldc, int64_t rows, int64_t cols, int64_t depth,
                          float alpha, bool accumulate) {
  float acc[Rows][Cols] = {};
  for (int64_t k = 0; k < depth; ++k) {
    const float* bk = b + k * ldb;
#pragma GCC unroll 4
    for (int64_t i = 0; i < Rows; ++i) {
      const float aik = kFull || i < rows ? a[i * a_row + k * a_col] : 0.0f;
#pragma omp simd
      for (int64_t j = 0; j < Cols; ++j) acc[i][j] += aik * (kFull || j < cols ? bk[j] : 0.0f);
    }
  }
  for (int64_t i = 0; i < (kFull ? Rows : rows); ++i)
    for (int64_t j = 0; j < (kFull ? Cols : cols); ++j)
      c[i * ldc + j] = (accumulate ? c[i * ldc + j] : 0.0f) + alpha * acc[i][j];
}

void tile_product(const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                  float* c, int64_t ldc, int64_t rows, int64_t n, int64_t depth, float alpha,
                  bool accumulate) {
  for (int64_t j0 = 0; j0 < n; j0 += kRegCols)
    for (int64_t i0 = 0; i0 < rows; i0 += kRegRows) {
      const int64_t block_rows = std::min(kRegRows, rows - i0),
                    block_cols = std::min(kRegCols, n - j0);
      const float* ab = a + i0 * a_row;
      float* cb = c + i0 * ldc + j0;
      if (block_rows == kRegRows && block_cols == kRegCols)
        product_block<kRegRows, kRegCols, true>(ab, a_row, a_col, b + j0, ldb, cb, ldc, block_rows,
                                                block_cols, depth, alpha, accumulate);
      else
        product_block<kRegRows, kRegCols, false>(ab, a_row, a_col, b + j0, ldb, cb, ldc, block_rows,
                                                 block_cols, depth, alpha, accumulate);
    }
}

// What one (query block, key block) tile of head h of batch n hides: −inf where the causal or
// the padding mask hides a key; with dropout, keep[r, c] = 1 where the mask keeps the element
// (a kept element is scaled by keep_scale).
struct TileMask {
  TileMask(const FlashAttentionParams& params, const Dims& m)
      : p(params),
        pad(params.pad_mask.defined() ? params.pad_mask.data<uint8_t>() : nullptr),
        threshold(keep_threshold(params.dropout_p)),
        keep_scale(1.0f / (1.0f - params.dropout_p)),
        s(m.s),
        heads(m.heads) {}

  const FlashAttentionParams& p;
  const uint8_t* pad;  // [b, s] or null
  uint32_t threshold;
  float keep_scale;
  int64_t s, heads;

  void apply(int64_t n, int64_t h, int64_t q0, int64_t rows, int64_t k0, int64_t cols, float* S,
             uint8_t* keep) const {
    for (int64_t r = 0; r < rows; ++r) {
      float* sr = S + r * kBlock;
      if (p.causal)
        for (int64_t c = std::max<int64_t>(0, q0 + r + 1 - k0); c < cols; ++c) sr[c] = kNegInf;
      if (pad != nullptr) {
        const uint8_t* pr = pad + n * s + k0;
        for (int64_t c = 0; c < cols; ++c)
          if (pr[c]) sr[c] = kNegInf;
      }
      if (p.dropout_p > 0.0f) {
        const MaskRow& row = (*p.dropout_rows)[size_t((n * heads + h) * s + q0 + r)];
        draw_keep_row(p.seed, row.key, row.counter_base + uint64_t(k0), cols, threshold,
                      keep + r * kBlock);
      }
    }
  }
};

// The key blocks a query block [q0, q0 + rows) sees: all, or with the causal mask those that
// start at or before its last query.
int64_t key_blocks_seen(const FlashAttentionParams& p, int64_t s, int64_t q0, int64_t rows) {
  const int64_t all = (s + kBlock - 1) / kBlock;
  return p.causal ? std::min(all, (q0 + rows - 1) / kBlock + 1) : all;
}

template <typename T>
void forward_typed(const Tensor& qkv_t, const FlashAttentionParams& p, Tensor& out_t,
                   Tensor& lse_t) {
  const Dims m(qkv_t, p.queries_per_group);
  const T* qkv = qkv_t.data<T>();
  T* out = out_t.data<T>();
  float* lse = lse_t.data<float>();  // [b, H, s]
  const TileMask mask(p, m);
  const int64_t d = m.d, query_blocks = (m.s + kBlock - 1) / kBlock;
  // Per thread: Q, Kᵀ, V, accumulator, scores, keep, running max and sum.
  const int64_t floats = 4 * kBlock * d + kBlock * kBlock + 2 * kBlock;
  std::vector<float> scratch(size_t(omp_get_max_threads() * floats));
  std::vector<uint8_t> keep_scratch(size_t(omp_get_max_threads() * kBlock * kBlock));

#pragma omp parallel for schedule(dynamic)
  for (int64_t task = 0; task < m.b * m.heads * query_blocks; ++task) {
    const int64_t n = task / (m.heads * query_blocks), h = task / query_blocks % m.heads,
                  q0 = task % query_blocks * kBlock, rows = std::min(kBlock, m.s - q0);
    const int64_t g = h / m.q, i = h % m.q;
    float* q = scratch.data() + omp_get_thread_num() * floats;  // [rows, d]
    float* kt = q + kBlock * d;                                 // [d, kBlock]
    float* v = kt + kBlock * d;                                 // [cols, d]
    float* acc = v + kBlock * d;                                // [rows, d]
    float* S = acc + kBlock * d;                                // [rows, kBlock]
    float* run_max = S + kBlock * kBlock;                       // [rows]
    float* run_sum = run_max + kBlock;                          // [rows]
    uint8_t* keep = keep_scratch.data() + omp_get_thread_num() * kBlock * kBlock;
    load_rows(
        qkv, [&](int64_t t) { return m.qkv_at(t, n, g, i); }, q0, rows, d, q);
    std::fill(acc, acc + rows * d, 0.0f);
    std::fill(run_max, run_max + rows, kNegInf);
    std::fill(run_sum, run_sum + rows, 0.0f);
    for (int64_t kb = 0; kb < key_blocks_seen(p, m.s, q0, rows); ++kb) {
      const int64_t k0 = kb * kBlock, cols = std::min(kBlock, m.s - k0);
      load_rows_transposed(
          qkv, [&](int64_t t) { return m.qkv_at(t, n, g, m.q); }, k0, cols, d, kt);
      load_rows(
          qkv, [&](int64_t t) { return m.qkv_at(t, n, g, m.q + 1); }, k0, cols, d, v);
      tile_product(q, d, 1, kt, kBlock, S, kBlock, rows, cols, d, p.scale, false);  // Q Kᵀ
      mask.apply(n, h, q0, rows, k0, cols, S, keep);
      for (int64_t r = 0; r < rows; ++r) {
        float* sr = S + r * kBlock;
        float tile_max = kNegInf;
        for (int64_t c = 0; c < cols; ++c) tile_max = std::max(tile_max, sr[c]);
        const float new_max = std::max(run_max[r], tile_max);
        if (new_max == kNegInf) {  // every key so far masked: nothing to add
          std::fill(sr, sr + cols, 0.0f);
          continue;
        }
        const float rescale = exp_approx(run_max[r] - new_max);  // 0 while run_max is −inf
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < cols; ++c) {
          const float e = exp_approx(sr[c] - new_max);  // −inf (masked) → 0
          sum += e;
          sr[c] = e;
        }
        run_sum[r] = run_sum[r] * rescale + sum;
        run_max[r] = new_max;
        float* ar = acc + r * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) ar[k] *= rescale;
        if (p.dropout_p > 0.0f) {
          const uint8_t* kr = keep + r * kBlock;
          for (int64_t c = 0; c < cols; ++c) sr[c] = kr[c] ? sr[c] * mask.keep_scale : 0.0f;
        }
      }
      tile_product(S, kBlock, 1, v, d, acc, d, rows, d, cols, 1.0f, true);  // acc += P V
    }
    for (int64_t r = 0; r < rows; ++r) {
      T* o = out + m.out_at(q0 + r, n, h);
      const float inv = run_sum[r] > 0.0f ? 1.0f / run_sum[r] : 0.0f;
#pragma omp simd
      for (int64_t k = 0; k < d; ++k) o[k] = from_f32<T>(acc[r * d + k] * inv);
      lse[(n * m.heads + h) * m.s + q0 + r] =
          run_sum[r] > 0.0f ? run_max[r] + std::log(run_sum[r]) : kNegInf;
    }
  }
}

template <typename T>
void backward_typed(const Tensor& qkv_t, const Tensor& out_t, const Tensor& lse_t,
                    const Tensor& dout_t, const FlashAttentionParams& p, Tensor& dqkv_t) {
  const Dims m(qkv_t, p.queries_per_group);
  const T* qkv = qkv_t.data<T>();
  const T* out = out_t.data<T>();
  const T* dout = dout_t.data<T>();
  const float* lse = lse_t.data<float>();  // [b, H, s]
  T* dqkv = dqkv_t.data<T>();
  const TileMask mask(p, m);
  const int64_t d = m.d, s = m.s, key_blocks = (s + kBlock - 1) / kBlock;

  // D[n, h, t] = Σ_k dout · out: Σ_c P·dP over the dropped probabilities (the softmax
  // backward's row term; with dropout Σ_c P ⊙ Z ⊙ (dout·v_c) = dout · out).
  std::vector<float> D(size_t(m.b * m.heads * s));
#pragma omp parallel for schedule(static)
  for (int64_t row = 0; row < m.b * m.heads * s; ++row) {
    const int64_t n = row / (m.heads * s), h = row / s % m.heads, t = row % s;
    const T* o = out + m.out_at(t, n, h);
    const T* dout_row = dout + m.out_at(t, n, h);
    float sum = 0.0f;
    for (int64_t k = 0; k < d; ++k) sum += to_f32(dout_row[k]) * to_f32(o[k]);
    D[size_t(row)] = sum;
  }

  // Per thread: K, Kᵀ, Vᵀ, Q, dout rows, dK and dV accumulators, P, dP, and dQ of the group's
  // q heads over the whole sequence.
  const int64_t tile_floats = 7 * kBlock * d + 2 * kBlock * kBlock;
  const int64_t floats = tile_floats + m.q * s * d;
  std::vector<float> scratch(size_t(omp_get_max_threads() * floats));
  std::vector<uint8_t> keep_scratch(size_t(omp_get_max_threads() * kBlock * kBlock));

#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t task = 0; task < m.b * m.groups; ++task) {
    const int64_t n = task / m.groups, g = task % m.groups;
    float* k_rows = scratch.data() + omp_get_thread_num() * floats;  // [cols, d]
    float* kt = k_rows + kBlock * d;                                 // [d, kBlock]
    float* vt = kt + kBlock * d;                                     // [d, kBlock]
    float* q = vt + kBlock * d;                                      // [rows, d]
    float* dout_rows = q + kBlock * d;                               // [rows, d]
    float* dk = dout_rows + kBlock * d;                              // [cols, d]
    float* dv = dk + kBlock * d;                                     // [cols, d]
    float* P = dv + kBlock * d;                                      // [rows, kBlock]
    float* dP = P + kBlock * kBlock;                                 // [rows, kBlock]
    float* dq = dP + kBlock * kBlock;                                // [q, s, d]
    uint8_t* keep = keep_scratch.data() + omp_get_thread_num() * kBlock * kBlock;
    std::fill(dq, dq + m.q * s * d, 0.0f);
    auto key_at = [&](int64_t t) { return m.qkv_at(t, n, g, m.q); };
    auto value_at = [&](int64_t t) { return m.qkv_at(t, n, g, m.q + 1); };
    for (int64_t kb = 0; kb < key_blocks; ++kb) {
      const int64_t k0 = kb * kBlock, cols = std::min(kBlock, s - k0);
      load_rows(qkv, key_at, k0, cols, d, k_rows);
      load_rows_transposed(qkv, key_at, k0, cols, d, kt);
      load_rows_transposed(qkv, value_at, k0, cols, d, vt);
      std::fill(dk, dk + cols * d, 0.0f);
      std::fill(dv, dv + cols * d, 0.0f);
      for (int64_t i = 0; i < m.q; ++i) {
        const int64_t h = g * m.q + i;
        // Causal: the query blocks that end before this key block see none of it.
        for (int64_t q0 = p.causal ? k0 : 0; q0 < s; q0 += kBlock) {
          const int64_t rows = std::min(kBlock, s - q0);
          load_rows(
              qkv, [&](int64_t t) { return m.qkv_at(t, n, g, i); }, q0, rows, d, q);
          load_rows(
              dout, [&](int64_t t) { return m.out_at(t, n, h); }, q0, rows, d, dout_rows);
          tile_product(q, d, 1, kt, kBlock, P, kBlock, rows, cols, d, p.scale, false);
          mask.apply(n, h, q0, rows, k0, cols, P, keep);
          const float* lse_rows = lse + (n * m.heads + h) * s + q0;
          const float* D_rows = D.data() + (n * m.heads + h) * s + q0;
          // P = exp(S − lse): the forward's probabilities (0 where masked, and on rows whose
          // every key is masked, lse = −inf).
          for (int64_t r = 0; r < rows; ++r) {
            float* pr = P + r * kBlock;
            const float l = lse_rows[r];
            if (l == kNegInf) {
              std::fill(pr, pr + cols, 0.0f);
              continue;
            }
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) pr[c] = exp_approx(pr[c] - l);
          }
          // d(dropped probabilities) = dout Vᵀ
          tile_product(dout_rows, d, 1, vt, kBlock, dP, kBlock, rows, cols, d, 1.0f, false);
          for (int64_t r = 0; r < rows; ++r) {
            float* pr = P + r * kBlock;
            float* dpr = dP + r * kBlock;
            const uint8_t* kr = keep + r * kBlock;
            const float Dr = D_rows[r];
            for (int64_t c = 0; c < cols; ++c) {
              const float z = p.dropout_p > 0.0f ? (kr[c] ? mask.keep_scale : 0.0f) : 1.0f;
              const float prob = pr[c];
              pr[c] = prob * z;                             // dropped probability, for dV
              dpr[c] = p.scale * prob * (dpr[c] * z - Dr);  // d(scaled scores) · scale
            }
          }
          // dV += Pdᵀ dout, dQ += dS K, dK += dSᵀ Q (a transposed tile: strides swapped).
          tile_product(P, 1, kBlock, dout_rows, d, dv, d, cols, d, rows, 1.0f, true);
          tile_product(dP, kBlock, 1, k_rows, d, dq + (i * s + q0) * d, d, rows, d, cols, 1.0f,
                       true);
          tile_product(dP, 1, kBlock, q, d, dk, d, cols, d, rows, 1.0f, true);
        }
      }
      for (int64_t c = 0; c < cols; ++c) {
        T* dk_out = dqkv + m.qkv_at(k0 + c, n, g, m.q);
        T* dv_out = dqkv + m.qkv_at(k0 + c, n, g, m.q + 1);
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) {
          dk_out[k] = from_f32<T>(dk[c * d + k]);
          dv_out[k] = from_f32<T>(dv[c * d + k]);
        }
      }
    }
    for (int64_t i = 0; i < m.q; ++i)
      for (int64_t t = 0; t < s; ++t) {
        T* dq_out = dqkv + m.qkv_at(t, n, g, i);
        const float* dq_row = dq + (i * s + t) * d;
#pragma omp simd
        for (int64_t k = 0; k < d; ++k) dq_out[k] = from_f32<T>(dq_row[k]);
      }
  }
}

}  // namespace

void flash_attention_forward(const Tensor& qkv, const FlashAttentionParams& params, Tensor& out,
                             Tensor& lse) {
  dispatch_float(qkv.dtype(), "flash_attention_forward qkv",
                 [&](auto tag) { forward_typed<decltype(tag)>(qkv, params, out, lse); });
}

void flash_attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dout, const FlashAttentionParams& params,
                              Tensor& dqkv) {
  dispatch_float(qkv.dtype(), "flash_attention_backward qkv", [&](auto tag) {
    backward_typed<decltype(tag)>(qkv, out, lse, dout, params, dqkv);
  });
}

}  // namespace megatron::kernels::cpu
