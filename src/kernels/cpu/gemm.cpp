// kernels::cpu::gemm (contract: kernels/gemm.h; kernels/gemm.cpp checks the operands, builds the
// GemmProblem and keeps empty and K = 0 problems away from here): one backend per dtype
// (numbers and reasons in docs/kernels.md):
//   f32  → a batch (batch > 1) as one oneDNN matmul when oneDNN has a JIT kernel for it; else
//          OpenBLAS sgemm when its kernel can run on this CPU, else oneDNN matmul, else (a build
//          with neither library, or no oneDNN JIT kernel) the built-in blocked GEMM;
//   bf16 → oneDNN matmul when it has a JIT kernel (AVX-512 / AMX CPUs); otherwise the bf16
//          operands are widened to f32 (exact) and multiplied by the f32 path, which still
//          accumulates in f32 and rounds C once;
//   f64  → OpenBLAS dgemm when its kernel can run on this CPU, else a plain loop in f64
//          (oneDNN has no f64 matmul on CPUs); only the MoE router's --moe-router-dtype fp64
//          multiplies in f64, [tokens, hidden] by [experts, hidden]ᵀ, so speed matters little;
//   f32 or bf16, with few rows of an untransposed A (M <= kSmallRows: the decode step of
//   generation,
//          one token per sequence) → small_rows: each element of B is read once, in its own
//          dtype (f32 accumulation). BLAS would pack (copy) all of B for a product that reads
//          it once, bf16 would widen all of B first, and a batched attention product would be
//          one BLAS call (and thread wake-up) per head.
// OpenBLAS and oneDNN are optional (MEGATRON_HAS_OPENBLAS / MEGATRON_HAS_ONEDNN, from
// cmake/MegatronDependencies.cmake).
#include <algorithm>
#include <string>
#include <vector>

#ifdef MEGATRON_HAS_OPENBLAS
#include "kernels/cpu/blas_gemm.h"
#endif
#include "kernels/cpu/blocked_gemm.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/gemm_backend.h"
#ifdef MEGATRON_HAS_ONEDNN
#include "kernels/cpu/onednn_matmul.h"
#endif

namespace megatron::kernels::cpu {

namespace {

#ifdef MEGATRON_HAS_ONEDNN
// Batch entry i of a problem as a problem of its own.
GemmProblem entry(const GemmProblem& p, int64_t i) {
  const size_t ab = dtype_size(p.ab_dtype), cs = dtype_size(p.c_dtype);
  GemmProblem q = p;
  q.batch = 1;
  q.a = static_cast<const char*>(p.a) + i * p.batch_a * int64_t(ab);
  q.b = static_cast<const char*>(p.b) + i * p.batch_b * int64_t(ab);
  q.c = static_cast<char*>(p.c) + i * p.batch_c * int64_t(cs);
  return q;
}
#endif

// oneDNN in one batched call or, where it only has its reference kernel for the batch strides
// (e.g. a broadcast operand), one 2-D call per entry. Entries share one signature, so the first
// answers for all. False (nothing written) when oneDNN has no JIT kernel at all.
bool run_onednn(const GemmProblem& p) {
#ifdef MEGATRON_HAS_ONEDNN
  if (onednn_matmul(p)) return true;
  if (p.batch == 1 || !onednn_matmul(entry(p, 0))) return false;
  for (int64_t i = 1; i < p.batch; ++i) onednn_matmul(entry(p, i));
  return true;
#else
  (void)p;
  return false;
#endif
}

// A batch of products (attention's per-head QKᵀ and PV: 96 entries of 128×128×64 for GPT-2 at
// micro-batch 8) as one oneDNN primitive, which spreads the entries over the threads; OpenBLAS
// takes them one call at a time (bench/RESULTS.md, issue 17). False when oneDNN has no JIT
// kernel for the batch as a whole.
bool run_onednn_batched(const GemmProblem& p) {
#ifdef MEGATRON_HAS_ONEDNN
  return p.batch > 1 && onednn_matmul(p);
#else
  (void)p;
  return false;
#endif
}

void run_f32(const GemmProblem& p) {
  if (run_onednn_batched(p)) return;
#ifdef MEGATRON_HAS_OPENBLAS
  if (blas_usable()) return blas_sgemm(p);
#endif
  if (run_onednn(p)) return;
  blocked_sgemm(p);
}

// C = alpha · op(A) · op(B) + beta · C in f64, one OpenMP thread per row of C, each sum in k
// order (a build without OpenBLAS, or a CPU its kernel cannot run on).
void loop_dgemm(const GemmProblem& p) {
  for (int64_t e = 0; e < p.batch; ++e) {
    const double* a = static_cast<const double*>(p.a) + e * p.batch_a;
    const double* b = static_cast<const double*>(p.b) + e * p.batch_b;
    double* c = static_cast<double*>(p.c) + e * p.batch_c;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < p.n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < p.k; ++q)
          acc += (p.trans_a ? a[q * p.lda + i] : a[i * p.lda + q]) *
                 (p.trans_b ? b[j * p.ldb + q] : b[q * p.ldb + j]);
        double& out = c[i * p.ldc + j];
        out = double(p.alpha) * acc + (p.beta != 0.f ? double(p.beta) * out : 0.0);
      }
  }
}

void run_f64(const GemmProblem& p) {
#ifdef MEGATRON_HAS_OPENBLAS
  if (blas_usable()) return blas_dgemm(p);
#endif
  loop_dgemm(p);
}

// Copies `entries` bf16 matrices [rows, cols] (row stride ld, entry e at src + e * stride) into
// one contiguous f32 array [entries, rows, cols]. One parallel region for all entries: a batch of
// small matrices (attention's heads) would otherwise pay a region's start-up per entry.
void widen(const bf16* src, int64_t entries, int64_t stride, int64_t rows, int64_t cols, int64_t ld,
           float* dst) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t e = 0; e < entries; ++e)
    for (int64_t r = 0; r < rows; ++r)
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j)
        dst[(e * rows + r) * cols + j] = to_f32(src[e * stride + r * ld + j]);
}

// A per-thread f32 buffer of at least n elements. GEMMs run on every layer of every step:
// growing a buffer that lives across calls avoids allocating (and zero-filling) the widened
// operands each time.
float* scratch(std::vector<float>& buffer, int64_t n) {
  if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
  return buffer.data();
}

// bf16 operands without a oneDNN JIT kernel: every batch entry widened to f32, then run_f32 once
// for the whole batch, so that a batched product (attention's per-head GEMMs) stays one batched
// call (oneDNN's batched matmul) instead of a small BLAS call and a few parallel regions per
// entry (bench/RESULTS.md: 10x slower at GPT-2's 96 heads x 128 x 64 on a Zen 3). An operand
// shared by every entry (batch stride 0) is widened once.
void run_bf16_widened(const GemmProblem& p) {
  const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  const int64_t a_entries = p.batch_a == 0 ? 1 : p.batch, b_entries = p.batch_b == 0 ? 1 : p.batch;
  thread_local std::vector<float> a_buffer, b_buffer, c_buffer;
  float* a = scratch(a_buffer, a_entries * a_rows * a_cols);  // op(A) [entries, rows, cols]
  float* b = scratch(b_buffer, b_entries * b_rows * b_cols);  // op(B) [entries, rows, cols]
  widen(static_cast<const bf16*>(p.a), a_entries, p.batch_a, a_rows, a_cols, p.lda, a);
  widen(static_cast<const bf16*>(p.b), b_entries, p.batch_b, b_rows, b_cols, p.ldb, b);
  GemmProblem q = p;
  q.ab_dtype = q.c_dtype = DType::F32;
  q.a = a;
  q.b = b;
  q.lda = a_cols;
  q.ldb = b_cols;
  q.batch_a = p.batch_a == 0 ? 0 : a_rows * a_cols;
  q.batch_b = p.batch_b == 0 ? 0 : b_rows * b_cols;
  if (p.c_dtype == DType::F32) return run_f32(q);
  float* c = scratch(c_buffer, p.batch * p.m * p.n);  // [batch, M, N]
  bf16* cb = static_cast<bf16*>(p.c);                 // entries batch_c apart, rows ldc apart
  if (p.beta != 0.f) widen(cb, p.batch, p.batch_c, p.m, p.n, p.ldc, c);
  q.c = c;
  q.ldc = p.n;
  q.batch_c = p.m * p.n;
  run_f32(q);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t e = 0; e < p.batch; ++e)
    for (int64_t r = 0; r < p.m; ++r)
#pragma omp simd
      for (int64_t j = 0; j < p.n; ++j)
        cb[e * p.batch_c + r * p.ldc + j] = from_f32<bf16>(c[(e * p.m + r) * p.n + j]);
}

// Few rows of A (M <= kSmallRows, not transposed), batched or not: the decode step of
// generation (y = x Wᵀ for one token per sequence; attention of one query over the KV cache).
//   trans_b:  C[m, n] = α · Σ_k A[m, k] · B[n, k] + β · C[m, n]   (B [N, K]: dot products)
//   !trans_b: C[m, n] = α · Σ_k A[m, k] · B[k, n] + β · C[m, n]   (B [K, N]: row updates)
// Every element of B is read once, in its own dtype; sums in f32, C rounded once.
constexpr int64_t kSmallRows = 16;

bool small_rows_problem(const GemmProblem& p) {
  return p.m <= kSmallRows && !p.trans_a && p.ab_dtype != DType::F64;
}

template <typename T, typename TC>
void rows_typed(const GemmProblem& p) {
  const int64_t m = p.m, n = p.n, k = p.k;
  const auto store = [&](TC& out, float acc) {
    const float prior = p.beta != 0.f ? p.beta * to_f32(out) : 0.f;  // β = 0 ignores C
    out = from_f32<TC>(p.alpha * acc + prior);
  };
  // Work items: (batch entry, block of columns), so that one big matrix and many small ones
  // both spread over the threads.
  const int64_t block = p.trans_b ? 64 : 256;
  const int64_t blocks = (n + block - 1) / block, items = p.batch * blocks;
#pragma omp parallel if (items > 1 && p.batch * m * n * k >= 32768)
  {
    std::vector<float> a_f32(size_t(m * k)), acc(size_t(p.trans_b ? 0 : m * block));
    int64_t widened = -1;  // the batch entry a_f32 holds
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t e = item / blocks, c0 = (item % blocks) * block, c1 = std::min(n, c0 + block);
      const T* a = static_cast<const T*>(p.a) + e * p.batch_a;  // [M, K], row stride lda
      const T* b = static_cast<const T*>(p.b) + e * p.batch_b;
      TC* c = static_cast<TC*>(p.c) + e * p.batch_c;  // [M, N], row stride ldc
      if (widened != e) {  // A in f32 once per entry, so the inner loops widen only B
        for (int64_t r = 0; r < m; ++r)
          for (int64_t j = 0; j < k; ++j) a_f32[size_t(r * k + j)] = to_f32(a[r * p.lda + j]);
        widened = e;
      }
      if (p.trans_b) {
        for (int64_t col = c0; col < c1; ++col) {
          const T* brow = b + col * p.ldb;  // [K]
          int64_t r = 0;
          for (; r + 4 <= m; r += 4) {  // four rows per pass over the B row: B widened once
            const float* a0 = a_f32.data() + r * k;
            const float *a1 = a0 + k, *a2 = a1 + k, *a3 = a2 + k;
            float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
            for (int64_t j = 0; j < k; ++j) {
              const float x = to_f32(brow[j]);
              s0 += a0[j] * x;
              s1 += a1[j] * x;
              s2 += a2[j] * x;
              s3 += a3[j] * x;
            }
            store(c[r * p.ldc + col], s0);
            store(c[(r + 1) * p.ldc + col], s1);
            store(c[(r + 2) * p.ldc + col], s2);
            store(c[(r + 3) * p.ldc + col], s3);
          }
          for (; r < m; ++r) {
            const float* arow = a_f32.data() + r * k;
            float sum = 0.f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < k; ++j) sum += arow[j] * to_f32(brow[j]);
            store(c[r * p.ldc + col], sum);
          }
        }
      } else {
        const int64_t w = c1 - c0;
        std::fill(acc.begin(), acc.begin() + m * w, 0.f);
        for (int64_t j = 0; j < k; ++j) {
          const T* brow = b + j * p.ldb + c0;  // [w]
          for (int64_t r = 0; r < m; ++r) {
            const float x = a_f32[size_t(r * k + j)];
            float* out = acc.data() + r * w;
#pragma omp simd
            for (int64_t col = 0; col < w; ++col) out[col] += x * to_f32(brow[col]);
          }
        }
        for (int64_t r = 0; r < m; ++r)
          for (int64_t col = 0; col < w; ++col)
            store(c[r * p.ldc + c0 + col], acc[size_t(r * w + col)]);
      }
    }
  }
}

void small_rows(const GemmProblem& p) {
  if (p.ab_dtype == DType::F32) return rows_typed<float, float>(p);
  if (p.c_dtype == DType::F32) return rows_typed<bf16, float>(p);
  rows_typed<bf16, bf16>(p);
}

// oneDNN's implementation for p when it has a JIT kernel ("brg:avx512_core_amx_bf16", ...), else
// "" (no oneDNN in this build, or only its reference loop, which run_onednn declines).
std::string onednn_jit_impl(const GemmProblem& p) {
#ifdef MEGATRON_HAS_ONEDNN
  const std::string impl = onednn_matmul_impl(p);
  if (impl != "none" && impl.rfind("ref", 0) != 0) return impl;
#else
  (void)p;
#endif
  return "";
}

std::string f32_backend_name(const GemmProblem& p) {
  if (small_rows_problem(p)) return "small_rows (M <= 16: B read once)";
#ifdef MEGATRON_HAS_OPENBLAS
  if (blas_usable()) return "OpenBLAS (" + blas_core_name() + ")";
#endif
  const std::string impl = onednn_jit_impl(p);
  return impl.empty() ? std::string(kBlockedGemmName) : "oneDNN " + impl;
}

}  // namespace

std::string gemm_library_note() {
#ifdef MEGATRON_HAS_OPENBLAS
  return blas_core_note();
#else
  return "";
#endif
}

std::string gemm_backend_name(const GemmProblem& p) {
  if (p.ab_dtype == DType::F64) {
#ifdef MEGATRON_HAS_OPENBLAS
    if (blas_usable()) return "OpenBLAS dgemm (" + blas_core_name() + ")";
#endif
    return "f64 loop";
  }
  if (p.ab_dtype == DType::F32 || small_rows_problem(p)) return f32_backend_name(p);
  const std::string impl = onednn_jit_impl(p);
  if (!impl.empty()) return "oneDNN " + impl;
  GemmProblem widened = p;
  widened.ab_dtype = widened.c_dtype = DType::F32;
  return "bf16 widened to f32, then " + f32_backend_name(widened);
}

void gemm(const GemmProblem& p) {
  if (p.ab_dtype == DType::F64) return run_f64(p);
  if (small_rows_problem(p)) return small_rows(p);
  if (p.ab_dtype == DType::F32) return run_f32(p);
  if (!run_onednn(p)) run_bf16_widened(p);
}

}  // namespace megatron::kernels::cpu
