// The built-in blocked f32 GEMM (kernels/cpu/blocked_gemm.h), called directly, so that it is
// checked in every build (where OpenBLAS or oneDNN exists, kernels::gemm does not reach it),
// against a naive double-precision loop: odd sizes below one micro-tile, sizes past one packed
// block in every dimension (rows, columns, depth), all transposes, row strides wider than the
// rows, batches with gaps, alpha/beta, beta = 0 over NaN, and K = 0.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/blocked_gemm.h"
#include "kernels/cpu/gemm_backend.h"

namespace megatron {
namespace {

using kernels::GemmProblem;

struct Dims {
  int64_t batch, m, n, k;
};

// Runs one problem with padded row strides (ld = cols + 3) and batch strides with a gap, and
// compares every element of C (and that the padding was not written) with a double loop.
void check(const Dims& d, bool ta, bool tb, float alpha, float beta, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  const int64_t a_rows = ta ? d.k : d.m, a_cols = ta ? d.m : d.k;
  const int64_t b_rows = tb ? d.n : d.k, b_cols = tb ? d.k : d.n;
  const int64_t lda = a_cols + 3, ldb = b_cols + 3, ldc = d.n + 3;
  const int64_t sa = a_rows * lda + 5, sb = b_rows * ldb + 5, sc = d.m * ldc + 5;
  std::vector<float> a(size_t(d.batch * sa)), b(size_t(d.batch * sb)), c(size_t(d.batch * sc));
  for (float& x : a) x = uniform(gen);
  for (float& x : b) x = uniform(gen);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (float& x : c) x = beta == 0.f ? nan : uniform(gen);  // beta = 0 must not read C
  const std::vector<float> c0 = c;

  GemmProblem p;
  p.batch = d.batch;
  p.m = d.m;
  p.n = d.n;
  p.k = d.k;
  p.trans_a = ta;
  p.trans_b = tb;
  p.a = a.data();
  p.b = b.data();
  p.c = c.data();
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.batch_a = sa;
  p.batch_b = sb;
  p.batch_c = sc;
  p.alpha = alpha;
  p.beta = beta;
  kernels::cpu::blocked_sgemm(p);

  int64_t bad = 0;
  for (int64_t e = 0; e < d.batch; ++e)
    for (int64_t i = 0; i < d.m; ++i)
      for (int64_t j = 0; j < ldc && (e * sc + i * ldc + j) < int64_t(c.size()); ++j) {
        const size_t at = size_t(e * sc + i * ldc + j);
        if (j >= d.n) {  // row padding: untouched
          bad += !(std::isnan(c[at]) && std::isnan(c0[at])) && c[at] != c0[at];
          continue;
        }
        double sum = 0.0, magnitude = 0.0;
        for (int64_t q = 0; q < d.k; ++q) {
          const double av = ta ? a[size_t(e * sa + q * lda + i)] : a[size_t(e * sa + i * lda + q)];
          const double bv = tb ? b[size_t(e * sb + j * ldb + q)] : b[size_t(e * sb + q * ldb + j)];
          sum += av * bv;
          magnitude += std::fabs(av * bv);
        }
        const double old = beta == 0.f ? 0.0 : beta * double(c0[at]);  // C0 is NaN when beta = 0
        const double expected = alpha * sum + old;
        // f32 accumulation: error bounded by ~K·eps·Σ|a·b|; 4e-7·(K+1) is comfortably above it.
        const double tolerance =
            1e-6 + 4e-7 * double(d.k + 1) * (std::fabs(alpha) * magnitude + std::fabs(old));
        if (!(std::fabs(double(c[at]) - expected) <= tolerance) && bad++ < 5)
          ADD_FAILURE() << "C[" << e << "][" << i << "][" << j << "] = " << c[at] << ", expected "
                        << expected << " (batch " << d.batch << ", " << d.m << "x" << d.n << "x"
                        << d.k << ", trans_a " << ta << ", trans_b " << tb << ")";
      }
  EXPECT_EQ(bad, 0);
}

TEST(BlockedGemm, OddSizesAllTransposesAlphaBeta) {
  uint32_t seed = 1;
  for (const Dims& d :
       {Dims{1, 13, 17, 33}, Dims{1, 1, 1, 1}, Dims{1, 7, 3, 5}, Dims{3, 11, 29, 2}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] :
             {std::pair{1.f, 0.f}, std::pair{0.5f, 1.f}, std::pair{-2.f, 0.25f}})
          check(d, ta, tb, alpha, beta, seed++);
}

// Past one packed block in each dimension (rows > 96, columns > 512, depth > 256), so that
// several row and column tiles and several depth slices accumulate into C.
TEST(BlockedGemm, SizesPastOneBlockInEveryDimension) {
  uint32_t seed = 100;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check({2, 131, 547, 301}, ta, tb, 0.75f, 0.5f, seed++);
  check({1, 203, 67, 600}, false, true, 1.f, 0.f, seed++);
}

TEST(BlockedGemm, EmptyDepthScalesC) {
  check({2, 5, 9, 0}, false, false, 1.f, 0.5f, 7);
  check({1, 5, 9, 0}, true, true, 1.f, 0.f, 8);
}

// Backend selection (kernels/cpu/gemm.cpp): a build with neither OpenBLAS nor oneDNN runs f32
// GEMMs, and bf16 GEMMs after widening, on the blocked GEMM.
TEST(BlockedGemm, IsTheCpuBackendWithoutBlasLibraries) {
#if defined(MEGATRON_HAS_OPENBLAS) || defined(MEGATRON_HAS_ONEDNN)
  GTEST_SKIP() << "this build has OpenBLAS or oneDNN";
#else
  GemmProblem p;
  p.m = p.n = p.k = p.lda = p.ldb = p.ldc = 64;
  EXPECT_EQ(kernels::cpu::gemm_backend_name(p), "built-in blocked GEMM");
  p.ab_dtype = DType::BF16;
  EXPECT_EQ(kernels::cpu::gemm_backend_name(p), "bf16 widened to f32, then built-in blocked GEMM");
#endif
}

}  // namespace
}  // namespace megatron
