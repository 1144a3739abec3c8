// kernels::gemm / batched_gemm on CPU (contract: kernels/gemm.h): argument checks, then one
// backend per dtype (numbers and reasons in docs/kernels.md):
//   f32  → OpenBLAS sgemm when its kernel can run on this CPU, else oneDNN matmul;
//   bf16 → oneDNN matmul when it has a JIT kernel (AVX-512 / AMX CPUs); otherwise the bf16
//          operands are widened to f32 (exact) and multiplied by the f32 path, which still
//          accumulates in f32 and rounds C once.
#include "kernels/gemm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/blas_gemm.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_backend.h"
#include "kernels/cpu/onednn_matmul.h"

namespace megatron::kernels {

namespace {

using cpu::GemmProblem;

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

// oneDNN in one batched call or, where it only has its reference kernel for the batch strides
// (e.g. a broadcast operand), one 2-D call per entry. Entries share one signature, so the first
// answers for all. False (nothing written) when oneDNN has no JIT kernel at all.
bool run_onednn(const GemmProblem& p) {
  if (cpu::onednn_matmul(p)) return true;
  if (p.batch == 1 || !cpu::onednn_matmul(entry(p, 0))) return false;
  for (int64_t i = 1; i < p.batch; ++i) cpu::onednn_matmul(entry(p, i));
  return true;
}

void run_f32(const GemmProblem& p) {
  if (cpu::blas_usable()) return cpu::blas_sgemm(p);
  MT_CHECK(run_onednn(p), "oneDNN has no f32 matmul kernel for [", p.m, ", ", p.k, "] x [", p.k,
           ", ", p.n, "] on this CPU");
}

// Copies a bf16 matrix [rows, cols] with row stride ld into a contiguous f32 one.
void widen(const bf16* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) dst[r * cols + j] = cpu::to_f32(src[r * ld + j]);
}

// A per-thread f32 buffer of at least n elements. GEMMs run on every layer of every step:
// growing a buffer that lives across calls avoids allocating (and zero-filling) the widened
// operands each time.
float* scratch(std::vector<float>& buffer, int64_t n) {
  if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
  return buffer.data();
}

// bf16 operands without a oneDNN JIT kernel: widen each batch entry to f32 and use run_f32.
void run_bf16_widened(const GemmProblem& p) {
  const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
  const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
  thread_local std::vector<float> a_buffer, b_buffer, c_buffer;
  float* a = scratch(a_buffer, a_rows * a_cols);  // op(A) storage, contiguous
  float* b = scratch(b_buffer, b_rows * b_cols);  // op(B) storage, contiguous
  float* c = p.c_dtype == DType::BF16 ? scratch(c_buffer, p.m * p.n) : nullptr;  // [M, N]
  for (int64_t i = 0; i < p.batch; ++i) {
    widen(static_cast<const bf16*>(p.a) + i * p.batch_a, a_rows, a_cols, p.lda, a);
    widen(static_cast<const bf16*>(p.b) + i * p.batch_b, b_rows, b_cols, p.ldb, b);
    GemmProblem q = p;
    q.batch = 1;
    q.ab_dtype = DType::F32;
    q.c_dtype = DType::F32;
    q.a = a;
    q.b = b;
    q.lda = a_cols;
    q.ldb = b_cols;
    if (p.c_dtype == DType::F32) {
      q.c = static_cast<float*>(p.c) + i * p.batch_c;
      run_f32(q);
      continue;
    }
    bf16* cb = static_cast<bf16*>(p.c) + i * p.batch_c;
    if (p.beta != 0.f) widen(cb, p.m, p.n, p.ldc, c);
    q.c = c;
    q.ldc = p.n;
    run_f32(q);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < p.m; ++r)
#pragma omp simd
      for (int64_t j = 0; j < p.n; ++j) cb[r * p.ldc + j] = cpu::from_f32<bf16>(c[r * p.n + j]);
  }
}

// C = beta · C when K = 0 (an empty sum); the BLAS interfaces reject K = 0 leading dims.
void scale_c_only(const GemmProblem& p) {
  cpu::dispatch_float(p.c_dtype, "gemm c", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < p.batch; ++i)
      for (int64_t r = 0; r < p.m; ++r) {
        T* row = static_cast<T*>(p.c) + i * p.batch_c + r * p.ldc;
        for (int64_t j = 0; j < p.n; ++j)
          row[j] = cpu::from_f32<T>(p.beta == 0.f ? 0.f : p.beta * cpu::to_f32(row[j]));
      }
  });
}

void run(const GemmProblem& p) {
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  if (p.k == 0) return scale_c_only(p);
  if (p.ab_dtype == DType::F32) return run_f32(p);
  if (!run_onednn(p)) run_bf16_widened(p);
}

// Row stride of the trailing 2 dims of t (rows = size(-2), cols = size(-1)), checking the
// inner stride is 1. A single row's stride is meaningless, so it is reported as cols.
int64_t leading_dim(const Tensor& t, const char* what) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  MT_CHECK(cols <= 1 || t.stride(-1) == 1, "gemm ", what, " needs inner stride 1, got ",
           t.describe(), " with strides ", shape_str(t.strides()));
  const int64_t ld = rows <= 1 ? std::max<int64_t>(cols, 1) : t.stride(-2);
  MT_CHECK(ld >= cols, "gemm ", what, " has row stride ", ld, " smaller than its ", cols,
           " columns");
  return ld;
}

// Fills every field of a problem from the (2-D or 3-D) operands after checking them.
GemmProblem make_problem(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                         float alpha, float beta, int64_t dims) {
  cpu::require_cpu("gemm", {&a, &b, &c});
  const char* kind = dims == 2 ? "gemm" : "batched_gemm";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&a, &b, &c}) {
    MT_CHECK(t->defined(), kind, ": operand is undefined");
    MT_CHECK(t->dim() == dims, kind, " operands must be ", dims, "-D, got ", t->describe());
  }
  MT_CHECK(a.dtype() == b.dtype() && (a.dtype() == DType::F32 || a.dtype() == DType::BF16), kind,
           ": A and B must share dtype f32 or bf16, got ", a.describe(), " and ", b.describe());
  MT_CHECK(c.dtype() == DType::F32 || (a.dtype() == DType::BF16 && c.dtype() == DType::BF16), kind,
           ": C must be f32 (or bf16 with bf16 inputs), got ", c.describe());
  GemmProblem p;
  p.batch = dims == 3 ? a.size(0) : 1;
  p.m = trans_a ? a.size(-1) : a.size(-2);
  p.k = trans_a ? a.size(-2) : a.size(-1);
  const int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  p.n = trans_b ? b.size(-2) : b.size(-1);
  MT_CHECK(kb == p.k, kind, ": inner dimensions differ: op(A) is [", p.m, ", ", p.k,
           "], op(B) is [", kb, ", ", p.n, "] (A ", a.describe(), ", B ", b.describe(), ")");
  MT_CHECK(c.size(-2) == p.m && c.size(-1) == p.n, kind, ": C is ", c.describe(), ", expected [",
           p.m, ", ", p.n, "] trailing dims");
  if (dims == 3) {
    MT_CHECK(b.size(0) == p.batch && c.size(0) == p.batch, kind, ": batch sizes differ: A ",
             a.describe(), ", B ", b.describe(), ", C ", c.describe());
    p.batch_a = a.stride(0);
    p.batch_b = b.stride(0);
    p.batch_c = c.stride(0);
  }
  p.trans_a = trans_a;
  p.trans_b = trans_b;
  p.lda = leading_dim(a, "A");
  p.ldb = leading_dim(b, "B");
  p.ldc = leading_dim(c, "C");
  p.a = a.raw_data();
  p.b = b.raw_data();
  p.c = c.raw_data();
  p.ab_dtype = a.dtype();
  p.c_dtype = c.dtype();
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

std::string f32_backend_name(const GemmProblem& p) {
  if (cpu::blas_usable()) return "OpenBLAS (" + cpu::blas_core_name() + ")";
  return "oneDNN " + cpu::onednn_matmul_impl(p);
}

}  // namespace

std::string cpu::gemm_backend_name(const GemmProblem& p) {
  if (p.ab_dtype == DType::F32) return f32_backend_name(p);
  const std::string impl = cpu::onednn_matmul_impl(p);
  if (impl != "none" && impl.rfind("ref", 0) != 0) return "oneDNN " + impl;
  GemmProblem widened = p;
  widened.ab_dtype = widened.c_dtype = DType::F32;
  return "bf16 widened to f32, then " + f32_backend_name(widened);
}

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
          float beta) {
  run(make_problem(a, trans_a, b, trans_b, c, alpha, beta, 2));
}

void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                  float alpha, float beta) {
  run(make_problem(a, trans_a, b, trans_b, c, alpha, beta, 3));
}

}  // namespace megatron::kernels
