// The built-in blocked f32 GEMM (see blocked_gemm.h).
#include "kernels/cpu/blocked_gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace megatron::kernels::cpu {

namespace {

#if defined(__AVX512F__)
constexpr int kVec = 16;  // floats per SIMD vector
constexpr int kMR = 12;   // micro-tile rows: 12 × 2 accumulators of 32 vector registers
#else
constexpr int kVec = 8;  // AVX2 (or narrower: the compiler splits the vectors)
constexpr int kMR = 6;   // 6 × 2 accumulators of 16 vector registers
#endif
constexpr int kNR = 2 * kVec;      // micro-tile columns
constexpr int64_t kKC = 256;       // depth of a packed slice: a B micro-panel stays in L1
constexpr int64_t kMC = kMR * 8;   // rows of a packed A block (L2)
constexpr int64_t kNC = kNR * 16;  // columns of a packed B block

typedef float VecF __attribute__((vector_size(kVec * sizeof(float))));

inline VecF load(const float* p) {
  VecF v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void store(float* p, VecF v) {
  std::memcpy(p, &v, sizeof(v));
}

// One batch entry's operands, with op() applied by the accessors.
struct Operands {
  const float* a;
  const float* b;
  float* c;
  int64_t lda, ldb, ldc;
  bool trans_a, trans_b;
};

// op(A)[i0 + r, p0 + q] for r < mc, q < kc into micro-panels of kMR rows, each stored
// k-major (kMR values per depth step) and zero-padded to a multiple of kMR rows.
void pack_a(const Operands& o, int64_t i0, int64_t mc, int64_t p0, int64_t kc, float* out) {
  for (int64_t r0 = 0; r0 < mc; r0 += kMR) {
    const int64_t rows = std::min<int64_t>(kMR, mc - r0);
    float* panel = out + r0 * kc;
    for (int64_t q = 0; q < kc; ++q) {
      float* dst = panel + q * kMR;
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r0 + r, p = p0 + q;
        dst[r] = o.trans_a ? o.a[p * o.lda + i] : o.a[i * o.lda + p];
      }
      for (int64_t r = rows; r < kMR; ++r) dst[r] = 0.f;
    }
  }
}

// op(B)[p0 + q, j0 + s] for q < kc, s < nc into micro-panels of kNR columns, each stored
// k-major (kNR values per depth step) and zero-padded to a multiple of kNR columns.
void pack_b(const Operands& o, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float* out) {
  for (int64_t s0 = 0; s0 < nc; s0 += kNR) {
    const int64_t cols = std::min<int64_t>(kNR, nc - s0);
    float* panel = out + s0 * kc;
    for (int64_t q = 0; q < kc; ++q) {
      float* dst = panel + q * kNR;
      const int64_t p = p0 + q;
      if (!o.trans_b) {
        const float* src = o.b + p * o.ldb + j0 + s0;
        for (int64_t s = 0; s < cols; ++s) dst[s] = src[s];
      } else {
        for (int64_t s = 0; s < cols; ++s) dst[s] = o.b[(j0 + s0 + s) * o.ldb + p];
      }
      for (int64_t s = cols; s < kNR; ++s) dst[s] = 0.f;
    }
  }
}

// C tile (rows × cols ≤ kMR × kNR at c, row stride ldc) = alpha · A panel · B panel + beta · C,
// where beta == 0 writes C without reading it.
void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* c,
                  int64_t ldc, int64_t rows, int64_t cols, float alpha, float beta) {
  VecF acc[kMR][2];
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = VecF{};
  for (int64_t q = 0; q < kc; ++q) {
    const VecF b0 = load(b + q * kNR), b1 = load(b + q * kNR + kVec);
    const float* aq = a + q * kMR;
#pragma GCC unroll 16
    for (int i = 0; i < kMR; ++i) {
      acc[i][0] += aq[i] * b0;
      acc[i][1] += aq[i] * b1;
    }
  }
  if (rows == kMR && cols == kNR) {
    for (int i = 0; i < kMR; ++i) {
      float* row = c + i * ldc;
      if (beta == 0.f) {
        store(row, alpha * acc[i][0]);
        store(row + kVec, alpha * acc[i][1]);
      } else {
        store(row, alpha * acc[i][0] + beta * load(row));
        store(row + kVec, alpha * acc[i][1] + beta * load(row + kVec));
      }
    }
    return;
  }
  float tile[kMR][kNR];
  for (int i = 0; i < kMR; ++i) {
    store(tile[i], acc[i][0]);
    store(tile[i] + kVec, acc[i][1]);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float& out = c[i * ldc + j];
      out = beta == 0.f ? alpha * tile[i][j] : alpha * tile[i][j] + beta * out;
    }
}

// C[i0 : i0 + mc, j0 : j0 + nc] of one batch entry, over the whole depth K.
void tile(const Operands& o, int64_t k, int64_t i0, int64_t mc, int64_t j0, int64_t nc, float alpha,
          float beta, std::vector<float>& a_pack, std::vector<float>& b_pack) {
  const int64_t mc_padded = (mc + kMR - 1) / kMR * kMR, nc_padded = (nc + kNR - 1) / kNR * kNR;
  a_pack.resize(size_t(mc_padded * kKC));
  b_pack.resize(size_t(nc_padded * kKC));
  for (int64_t p0 = 0; p0 < k; p0 += kKC) {
    const int64_t kc = std::min(kKC, k - p0);
    pack_a(o, i0, mc, p0, kc, a_pack.data());
    pack_b(o, p0, kc, j0, nc, b_pack.data());
    const float beta_here = p0 == 0 ? beta : 1.f;  // later slices accumulate into C
    for (int64_t s0 = 0; s0 < nc; s0 += kNR)
      for (int64_t r0 = 0; r0 < mc; r0 += kMR)
        micro_kernel(kc, a_pack.data() + r0 * kc, b_pack.data() + s0 * kc,
                     o.c + (i0 + r0) * o.ldc + j0 + s0, o.ldc, std::min<int64_t>(kMR, mc - r0),
                     std::min<int64_t>(kNR, nc - s0), alpha, beta_here);
  }
}

}  // namespace

void blocked_sgemm(const GemmProblem& p) {
  MT_CHECK(p.ab_dtype == DType::F32 && p.c_dtype == DType::F32,
           "the built-in blocked GEMM takes f32 operands only");
  if (p.batch <= 0 || p.m <= 0 || p.n <= 0) return;
  const int64_t row_blocks = (p.m + kMC - 1) / kMC, col_blocks = (p.n + kNC - 1) / kNC;
  const int64_t tiles = p.batch * row_blocks * col_blocks;
#pragma omp parallel
  {
    std::vector<float> a_pack, b_pack;  // this thread's packed panels
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t entry = t / (row_blocks * col_blocks);
      const int64_t rb = (t / col_blocks) % row_blocks, cb = t % col_blocks;
      const Operands o{static_cast<const float*>(p.a) + entry * p.batch_a,
                       static_cast<const float*>(p.b) + entry * p.batch_b,
                       static_cast<float*>(p.c) + entry * p.batch_c,
                       p.lda,
                       p.ldb,
                       p.ldc,
                       p.trans_a,
                       p.trans_b};
      const int64_t i0 = rb * kMC, j0 = cb * kNC;
      if (p.k == 0) {  // an empty sum: C = beta · C
        for (int64_t i = i0; i < std::min(p.m, i0 + kMC); ++i)
          for (int64_t j = j0; j < std::min(p.n, j0 + kNC); ++j) {
            float& out = o.c[i * o.ldc + j];
            out = p.beta == 0.f ? 0.f : p.beta * out;
          }
        continue;
      }
      tile(o, p.k, i0, std::min(kMC, p.m - i0), j0, std::min(kNC, p.n - j0), p.alpha, p.beta,
           a_pack, b_pack);
    }
  }
}

}  // namespace megatron::kernels::cpu
