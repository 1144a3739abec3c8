// OpenBLAS f32 and f64 GEMM backend (see blas_gemm.h).
#include "kernels/cpu/blas_gemm.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace megatron::kernels::cpu {

namespace {

bool avx512_core(const char* core) {
  return core && (std::strstr(core, "SkylakeX") || std::strstr(core, "Cooperlake") ||
                  std::strstr(core, "SapphireRapids"));
}

}  // namespace

bool blas_usable() {
  static const bool usable =
      !avx512_core(openblas_get_corename()) || __builtin_cpu_supports("avx512f");
  return usable;
}

std::string blas_core_name() {
  return openblas_get_corename();
}

std::string blas_core_note() {
  const char* core = openblas_get_corename();
  if (!__builtin_cpu_supports("avx512f") || avx512_core(core)) return "";
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  return std::string("OpenBLAS runs its ") + (core ? core : "?") + " kernels on this AVX-512 CPU" +
         (forced && *forced ? std::string(" (OPENBLAS_CORETYPE=") + forced + ")" : "") +
         ": f32 GEMMs take about twice as long as with its AVX-512 kernels; unset "
         "OPENBLAS_CORETYPE to let OpenBLAS choose";
}

void blas_sgemm(const GemmProblem& p) {
  MT_CHECK(p.ab_dtype == DType::F32 && p.c_dtype == DType::F32,
           "OpenBLAS GEMM takes f32 operands only");
  MT_CHECK(blas_usable(), "OpenBLAS core '", openblas_get_corename(),
           "' cannot run on this CPU (unset OPENBLAS_CORETYPE)");
  const float* a = static_cast<const float*>(p.a);
  const float* b = static_cast<const float*>(p.b);
  float* c = static_cast<float*>(p.c);
  for (int64_t i = 0; i < p.batch; ++i)
    cblas_sgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans,
                p.trans_b ? CblasTrans : CblasNoTrans, blasint(p.m), blasint(p.n), blasint(p.k),
                p.alpha, a + i * p.batch_a, blasint(p.lda), b + i * p.batch_b, blasint(p.ldb),
                p.beta, c + i * p.batch_c, blasint(p.ldc));
}

void blas_dgemm(const GemmProblem& p) {
  MT_CHECK(p.ab_dtype == DType::F64 && p.c_dtype == DType::F64,
           "OpenBLAS dgemm takes f64 operands only");
  MT_CHECK(blas_usable(), "OpenBLAS core '", openblas_get_corename(),
           "' cannot run on this CPU (unset OPENBLAS_CORETYPE)");
  const double* a = static_cast<const double*>(p.a);
  const double* b = static_cast<const double*>(p.b);
  double* c = static_cast<double*>(p.c);
  for (int64_t i = 0; i < p.batch; ++i)
    cblas_dgemm(CblasRowMajor, p.trans_a ? CblasTrans : CblasNoTrans,
                p.trans_b ? CblasTrans : CblasNoTrans, blasint(p.m), blasint(p.n), blasint(p.k),
                double(p.alpha), a + i * p.batch_a, blasint(p.lda), b + i * p.batch_b,
                blasint(p.ldb), double(p.beta), c + i * p.batch_c, blasint(p.ldc));
}

}  // namespace megatron::kernels::cpu
