// kernels::gemm / batched_gemm (contract: kernels/gemm.h): checks the operands once, turns them
// into one GemmProblem and hands it to the device's backend (kernels::cpu::gemm: OpenBLAS /
// oneDNN; kernels::cuda::gemm: cuBLASLt). Problems with nothing to multiply never reach a
// backend: an empty C returns here, and K = 0 (an empty sum) sets C = β·C here with the
// elementwise kernels, so backends only see batch, M, N, K >= 1.
#include "kernels/gemm.h"

#include <algorithm>
#include <initializer_list>

#include "kernels/dispatch.h"
#include "kernels/elementwise.h"

namespace megatron::kernels {

namespace {

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

// Fills every field of a problem from the (2-D or 3-D) operands after checking them. Reads no
// element, so it is safe on any device.
GemmProblem make_problem(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                         float alpha, float beta, int64_t dims) {
  const char* kind = dims == 2 ? "gemm" : "batched_gemm";
  for (const Tensor* t : std::initializer_list<const Tensor*>{&a, &b, &c}) {
    MT_CHECK(t->defined(), kind, ": operand is undefined");
    MT_CHECK(t->dim() == dims, kind, " operands must be ", dims, "-D, got ", t->describe());
  }
  MT_CHECK(a.dtype() == b.dtype() &&
               (a.dtype() == DType::F32 || a.dtype() == DType::BF16 || a.dtype() == DType::F64),
           kind, ": A and B must share dtype f32, bf16 or f64, got ", a.describe(), " and ",
           b.describe());
  if (a.dtype() == DType::F64)
    MT_CHECK(c.dtype() == DType::F64, kind, ": C must be f64 with f64 inputs, got ", c.describe());
  else
    MT_CHECK(c.dtype() == DType::F32 || (a.dtype() == DType::BF16 && c.dtype() == DType::BF16),
             kind, ": C must be f32 (or bf16 with bf16 inputs), got ", c.describe());
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

// C = β·C for K = 0 (β = 0 writes zeros without reading C, as BLAS does), with the device's
// fill / scale kernels: on all of C when it is contiguous, else per batch entry and row (rows
// are contiguous: inner stride 1 was checked).
void scale_c_only(const Tensor& c, float beta) {
  if (!c.is_contiguous() && c.dim() > 1) {
    for (int64_t i = 0; i < c.size(0); ++i) scale_c_only(c.select(0, i), beta);
    return;
  }
  Tensor t = c;
  if (beta == 0.f)
    fill(t, 0.f);
  else
    scale(t, beta);
}

void run(const char* kernel, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
         Tensor& c, float alpha, float beta, int64_t dims) {
  const GemmProblem p = make_problem(a, trans_a, b, trans_b, c, alpha, beta, dims);
  const Device device = operand_device(kernel, {&a, &b, &c});
  if (p.batch == 0 || p.m == 0 || p.n == 0) return;
  if (p.k == 0) {
    MT_CHECK(p.c_dtype != DType::F64, kernel,
             ": an f64 product with K = 0 (an empty sum) is "
             "not supported");
    return scale_c_only(c, beta);
  }
  MT_DISPATCH(device, gemm, p);
}

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, float alpha,
          float beta) {
  run("gemm", a, trans_a, b, trans_b, c, alpha, beta, 2);
}

void batched_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                  float alpha, float beta) {
  run("batched_gemm", a, trans_a, b, trans_b, c, alpha, beta, 3);
}

}  // namespace megatron::kernels
