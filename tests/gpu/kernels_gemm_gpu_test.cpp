// kernels::gemm / batched_gemm on the GPU (cuBLASLt) against the CPU twin: every transpose
// combination, f32 and bf16 inputs, f32 and bf16 outputs, f64, alpha/beta, odd sizes, strided
// and misaligned operands, per-head batched views, K = 0, TF32 off by default, determinism.
//
// Both sides accumulate in f32 in different orders, so they are compared within twice the
// classical bound of one f32 dot product: |ΔC| <= 2·(K+2)·2^-23·(|α|·Σ|a||b| + |β|·|C0|)
// (2^-23 rather than 2^-24: tensor cores may truncate while accumulating), plus one rounding
// of C on each side for a bf16 C. A wrong mapping (transposes, strides, batch offsets) is off
// by O(1) and cannot hide inside that bound.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/gemm_options.h"

namespace megatron {
namespace {

using gpu_test::on_cpu;
using gpu_test::on_gpu;
using gpu_test::random_tensor;
using gpu_test::to_double;

// Element (i, j) of op(X) for a row-major X held as doubles, op = transpose when t.
double op_at(const std::vector<double>& x, bool t, int64_t rows_op, int64_t cols_op, int64_t i,
             int64_t j) {
  return t ? x[size_t(j * rows_op + i)] : x[size_t(i * cols_op + j)];
}

// Per-element tolerance for C = alpha·op(A)·op(B) + beta·C0 computed twice (see file comment).
// input_rounding: relative error of each input as the GPU multiplies it (TF32: 2^-10).
std::vector<double> gemm_tolerance(const Tensor& a, bool ta, const Tensor& b, bool tb,
                                   const Tensor& c0, const std::vector<double>& expected,
                                   float alpha, float beta, DType c_dtype,
                                   double input_rounding = 0.0) {
  const std::vector<double> av = to_double(a), bv = to_double(b), cv = to_double(c0);
  const int64_t m = c0.size(-2), n = c0.size(-1);
  const int64_t k = ta ? a.size(-2) : a.size(-1);
  const double acc = 2.0 * double(k + 2) * std::ldexp(1.0, -23) + 4.0 * input_rounding;
  const double out = c_dtype == DType::F32 ? 0.0 : gpu_test::unit_roundoff(c_dtype) * 2.0;
  std::vector<double> tol(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double bound = std::abs(double(beta)) * std::abs(cv[size_t(i * n + j)]);
      for (int64_t p = 0; p < k; ++p)
        bound += std::abs(double(alpha)) * std::abs(op_at(av, ta, m, k, i, p)) *
                 std::abs(op_at(bv, tb, k, n, p, j));
      const size_t e = size_t(i * n + j);
      tol[e] = acc * bound * (1.0 + out) + out * std::abs(expected[e]) + 1e-30;
    }
  return tol;
}

struct Case {
  int64_t m, n, k;
};

void check_gemm(const Case& s, bool ta, bool tb, DType ab, DType cd, float alpha, float beta,
                uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << dtype_name(ab) << " -> " << dtype_name(cd) << " m " << s.m
                                    << " n " << s.n << " k " << s.k << " ta " << ta << " tb " << tb
                                    << " alpha " << alpha << " beta " << beta);
  const Tensor a = random_tensor(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, ab, seed);
  const Tensor b = random_tensor(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, ab, seed + 1);
  const Tensor c0 = random_tensor({s.m, s.n}, cd, seed + 2);
  Tensor c_cpu = c0.clone();
  kernels::gemm(a, ta, b, tb, c_cpu, alpha, beta);
  Tensor c_gpu = on_gpu(c0);
  kernels::gemm(on_gpu(a), ta, on_gpu(b), tb, c_gpu, alpha, beta);
  const std::vector<double> expected = to_double(c_cpu);
  EXPECT_TRUE(gpu_test::within(to_double(c_gpu), expected,
                               gemm_tolerance(a, ta, b, tb, c0, expected, alpha, beta, cd)));
}

TEST(GpuGemm, MatchesCpuForEveryTransposeDtypeAndScale) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Case cases[] = {{13, 17, 11}, {67, 131, 259}, {1, 37, 5}, {64, 64, 64}, {29, 1, 3}};
  uint64_t seed = 100;
  for (const Case& s : cases)
    for (DType ab : {DType::F32, DType::BF16})
      for (DType cd : {DType::F32, DType::BF16}) {
        if (ab == DType::F32 && cd == DType::BF16) continue;  // not in the contract
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            check_gemm(s, ta, tb, ab, cd, 1.f, 0.f, seed += 3);
            check_gemm(s, ta, tb, ab, cd, 0.75f, 0.5f, seed += 3);
          }
      }
}

// f64 (CUBLAS_COMPUTE_64F, the MoE router's --moe-router-dtype fp64): both sides sum in f64, in
// different orders, so within a few f64 ulps of the sum of |terms| — 1e-13 relative.
TEST(GpuGemm, F64MatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  uint64_t seed = 500;
  for (const Case& s : {Case{13, 17, 11}, Case{67, 10, 259}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (auto [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{1.f, 1.f}}) {
          SCOPED_TRACE(::testing::Message() << s.m << "x" << s.n << "x" << s.k << " ta " << ta
                                            << " tb " << tb << " beta " << beta);
          const Tensor a = random_tensor(ta ? Shape{s.k, s.m} : Shape{s.m, s.k}, DType::F64, seed);
          const Tensor b =
              random_tensor(tb ? Shape{s.n, s.k} : Shape{s.k, s.n}, DType::F64, seed + 1);
          const Tensor c0 = random_tensor({s.m, s.n}, DType::F64, seed + 2);
          seed += 3;
          Tensor c_cpu = c0.clone();
          kernels::gemm(a, ta, b, tb, c_cpu, alpha, beta);
          Tensor c_gpu = on_gpu(c0);
          kernels::gemm(on_gpu(a), ta, on_gpu(b), tb, c_gpu, alpha, beta);
          const std::vector<double> got = to_double(on_cpu(c_gpu)), want = to_double(c_cpu);
          for (size_t i = 0; i < want.size(); ++i)
            EXPECT_NEAR(got[i], want[i], 1e-13 * double(s.k + 1)) << i;
        }
}

// The three products of a linear layer at a GPT-like shape with odd sizes (tokens 3·41).
TEST(GpuGemm, LinearLayerProducts) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : {DType::F32, DType::BF16}) {
    check_gemm({123, 96, 80}, false, true, dt, dt, 1.f, 0.f, 7);          // Y = X Wᵀ
    check_gemm({123, 80, 96}, false, false, dt, dt, 1.f, 0.f, 8);         // dX = dY W
    check_gemm({96, 80, 123}, true, false, dt, DType::F32, 1.f, 1.f, 9);  // dW += dYᵀ X
  }
}

// beta = 0 never reads C (NaN there must not leak into the result), as BLAS promises.
TEST(GpuGemm, BetaZeroIgnoresC) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor a = random_tensor({13, 11}, dt, 1), b = random_tensor({11, 17}, dt, 2);
    Tensor c = Tensor::empty({13, 17}, dt, gpu_test::gpu());
    kernels::fill(c, NAN);
    kernels::gemm(on_gpu(a), false, on_gpu(b), false, c);
    Tensor expected = Tensor::zeros({13, 17}, dt);
    kernels::gemm(a, false, b, false, expected);
    const std::vector<double> e = to_double(expected);
    EXPECT_TRUE(gpu_test::within(to_double(c), e,
                                 gemm_tolerance(a, false, b, false, expected, e, 1.f, 0.f, dt)));
  }
}

// Operands that are column slices of wider matrices: row strides larger than the row, and base
// addresses 2 or 4 bytes past an aligned one (cuBLASLt must be told the real alignment).
TEST(GpuGemm, StridedAndMisalignedOperands) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : {DType::F32, DType::BF16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " ta " << ta << " tb " << tb);
        const int64_t m = 19, n = 23, k = 21;
        const Tensor a_big = random_tensor(ta ? Shape{k, m + 3} : Shape{m, k + 3}, dt, 11);
        const Tensor b_big = random_tensor(tb ? Shape{n, k + 5} : Shape{k, n + 5}, dt, 12);
        const Tensor c_big = random_tensor({m, n + 7}, dt, 13);
        auto a_of = [&](const Tensor& big) { return big.slice(1, 1, 1 + (ta ? m : k)); };
        auto b_of = [&](const Tensor& big) { return big.slice(1, 3, 3 + (tb ? k : n)); };
        auto c_of = [&](const Tensor& big) { return big.slice(1, 1, 1 + n); };
        Tensor c_cpu_big = c_big.clone();
        Tensor c_cpu = c_of(c_cpu_big);
        kernels::gemm(a_of(a_big), ta, b_of(b_big), tb, c_cpu, 0.5f, 2.f);
        Tensor c_gpu_big = on_gpu(c_big);
        Tensor c_gpu = c_of(c_gpu_big);
        kernels::gemm(a_of(on_gpu(a_big)), ta, b_of(on_gpu(b_big)), tb, c_gpu, 0.5f, 2.f);
        // The columns outside the view are untouched; the view matches within the bound.
        const Tensor c_back = on_cpu(c_gpu_big);
        const Tensor outside_gpu = c_back.slice(1, n + 1, n + 7).clone();
        const Tensor outside_cpu = c_big.slice(1, n + 1, n + 7).clone();
        EXPECT_TRUE(gpu_test::same_bits(outside_gpu, outside_cpu));
        EXPECT_TRUE(
            gpu_test::same_bits(c_back.slice(1, 0, 1).clone(), c_big.slice(1, 0, 1).clone()));
        const std::vector<double> expected = to_double(c_cpu);
        EXPECT_TRUE(gpu_test::within(to_double(c_back.slice(1, 1, 1 + n)), expected,
                                     gemm_tolerance(a_of(a_big), ta, b_of(b_big), tb, c_of(c_big),
                                                    expected, 0.5f, 2.f, dt)));
      }
}

// Attention's per-head products on [s, b·heads, d] tensors viewed as [b·heads, s, d]:
// batch stride d, row stride b·heads·d; the context is written through the same kind of view.
TEST(GpuGemm, BatchedPerHeadViews) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t s = 13, bh = 5, d = 17;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor q = random_tensor({s, bh, d}, dt, 21), k = random_tensor({s, bh, d}, dt, 22);
    const Tensor v = random_tensor({s, bh, d}, dt, 23);
    auto heads = [](const Tensor& t) { return t.transpose(0, 1); };  // [bh, s, d]
    // scores[bh, s, s] = 0.25 · q kᵀ
    Tensor scores_cpu = Tensor::empty({bh, s, s}, dt);
    kernels::batched_gemm(heads(q), false, heads(k), true, scores_cpu, 0.25f, 0.f);
    Tensor scores_gpu = Tensor::empty({bh, s, s}, dt, gpu_test::gpu());
    kernels::batched_gemm(heads(on_gpu(q)), false, heads(on_gpu(k)), true, scores_gpu, 0.25f, 0.f);
    const std::vector<double> sc = to_double(scores_cpu), sg = to_double(scores_gpu);
    for (int64_t h = 0; h < bh; ++h) {
      const Tensor qh = heads(q).select(0, h), kh = heads(k).select(0, h);
      const Tensor c0 = Tensor::zeros({s, s}, dt);
      const std::vector<double> e(sc.begin() + h * s * s, sc.begin() + (h + 1) * s * s);
      const std::vector<double> g(sg.begin() + h * s * s, sg.begin() + (h + 1) * s * s);
      EXPECT_TRUE(
          gpu_test::within(g, e, gemm_tolerance(qh, false, kh, true, c0, e, 0.25f, 0.f, dt)))
          << "scores head " << h;
    }
    // ctx (viewed [bh, s, d] into an [s, bh, d] buffer) = scores · v, with beta = 1 on a
    // non-zero buffer: the strided C is read and written through the view.
    const Tensor ctx0 = random_tensor({s, bh, d}, dt, 24);
    Tensor ctx_cpu = ctx0.clone();
    Tensor ctx_cpu_view = heads(ctx_cpu);
    kernels::batched_gemm(scores_cpu, false, heads(v), false, ctx_cpu_view, 1.f, 1.f);
    Tensor ctx_gpu = on_gpu(ctx0);
    Tensor ctx_gpu_view = heads(ctx_gpu);
    kernels::batched_gemm(on_gpu(scores_cpu), false, heads(on_gpu(v)), false, ctx_gpu_view, 1.f,
                          1.f);
    const Tensor back = on_cpu(ctx_gpu);
    for (int64_t h = 0; h < bh; ++h) {
      const Tensor e_t = heads(ctx_cpu).select(0, h).clone();
      const std::vector<double> e = to_double(e_t);
      const Tensor c0 = heads(ctx0).select(0, h).clone();
      EXPECT_TRUE(
          gpu_test::within(to_double(heads(back).select(0, h)), e,
                           gemm_tolerance(scores_cpu.select(0, h), false, heads(v).select(0, h),
                                          false, c0, e, 1.f, 1.f, dt)))
          << "context head " << h;
    }
  }
}

// K = 0 is an empty sum: C = beta·C (and exactly 0 for beta = 0, whatever C held), bit for bit
// as on the CPU.
TEST(GpuGemm, EmptyInnerDimensionScalesC) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : {DType::F32, DType::BF16})
    for (float beta : {0.f, 1.f, -2.5f}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " beta " << beta);
      const Tensor a = Tensor::empty({7, 0}, dt), b = Tensor::empty({0, 9}, dt);
      const Tensor c0 = random_tensor({7, 9}, dt, 31);
      Tensor c_cpu = c0.clone();
      kernels::gemm(a, false, b, false, c_cpu, 1.f, beta);
      Tensor c_gpu = on_gpu(c0);
      kernels::gemm(on_gpu(a), false, on_gpu(b), false, c_gpu, 1.f, beta);
      EXPECT_TRUE(gpu_test::same_bits(c_gpu, c_cpu));
    }
}

// f32 stays f32 unless TF32 is allowed: 1 + 2^-15 survives a 1×1×1 product exactly (TF32 keeps
// 10 mantissa bits and would return 1). With TF32 allowed, results stay within TF32's bound.
TEST(GpuGemm, Tf32OnlyWhenAllowed) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  ASSERT_FALSE(kernels::allow_tf32());
  const float x = 1.f + std::ldexp(1.f, -15);
  Tensor c = Tensor::zeros({1, 1}, DType::F32, gpu_test::gpu());
  kernels::gemm(on_gpu(Tensor::from_vector<float>({x}, {1, 1})), false,
                on_gpu(Tensor::from_vector<float>({1.f}, {1, 1})), false, c);
  EXPECT_EQ(on_cpu(c).data<float>()[0], x);

  kernels::set_allow_tf32(true);
  const Tensor a = random_tensor({67, 259}, DType::F32, 41);
  const Tensor b = random_tensor({259, 131}, DType::F32, 42);
  const Tensor c0 = Tensor::zeros({67, 131}, DType::F32);
  Tensor c_cpu = c0.clone();
  kernels::gemm(a, false, b, false, c_cpu);
  Tensor c_gpu = on_gpu(c0);
  kernels::gemm(on_gpu(a), false, on_gpu(b), false, c_gpu);
  kernels::set_allow_tf32(false);
  const std::vector<double> e = to_double(c_cpu);
  EXPECT_TRUE(gpu_test::within(
      to_double(c_gpu), e,
      gemm_tolerance(a, false, b, false, c0, e, 1.f, 0.f, DType::F32, std::ldexp(1.0, -10))));
}

// The same problem gives the same bits on every call (one cached algorithm, ordered split-K).
TEST(GpuGemm, Deterministic) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (DType dt : {DType::F32, DType::BF16}) {
    // Long K and a small output: the shape where split-K algorithms are chosen.
    const Tensor a = on_gpu(random_tensor({4099, 64}, dt, 51));
    const Tensor b = on_gpu(random_tensor({4099, 96}, dt, 52));
    Tensor first = Tensor::zeros({64, 96}, DType::F32, gpu_test::gpu());
    kernels::gemm(a, true, b, false, first);
    for (int run = 0; run < 3; ++run) {
      Tensor again = Tensor::zeros({64, 96}, DType::F32, gpu_test::gpu());
      kernels::gemm(a, true, b, false, again);
      EXPECT_TRUE(gpu_test::same_bits(again, first)) << dtype_name(dt) << " run " << run;
    }
  }
}

}  // namespace
}  // namespace megatron
