// kernels::gemm and batched_gemm against a naive double-precision triple loop: all four
// transpose combinations, alpha/beta accumulation, strided views, batches, f32 and bf16; f64.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/gemm.h"

namespace megatron {
namespace {

using test::from_double;
using test::random_tensor;
using test::to_double;

// C[m, n] = alpha · Σ_k op(A)[m, k] · op(B)[k, n] + beta · C0[m, n], all in double.
std::vector<double> reference(const std::vector<double>& a, bool ta, const std::vector<double>& b,
                              bool tb, const std::vector<double>& c0, int64_t m, int64_t n,
                              int64_t k, double alpha, double beta) {
  std::vector<double> c(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < k; ++p)
        s += (ta ? a[size_t(p * m + i)] : a[size_t(i * k + p)]) *
             (tb ? b[size_t(j * k + p)] : b[size_t(p * n + j)]);
      c[size_t(i * n + j)] = alpha * s + (beta == 0.0 ? 0.0 : beta * c0[size_t(i * n + j)]);
    }
  return c;
}

struct Case {
  DType ab, c;
};

class GemmTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemmTest, AllTransposesWithAlphaBeta) {
  const auto [ab, cd] = GetParam();
  const int64_t m = 13, n = 17, k = 11 * 3;
  int seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] :
           {std::pair{1.f, 0.f}, std::pair{0.5f, 1.f}, std::pair{-2.f, 0.25f}}) {
        Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, ab, seed++);
        Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, ab, seed++);
        Tensor c = random_tensor({m, n}, cd, seed++);
        const std::vector<double> expected =
            reference(to_double(a), ta, to_double(b), tb, to_double(c), m, n, k, alpha, beta);
        kernels::gemm(a, ta, b, tb, c, alpha, beta);
        // f32 accumulation over K=33 terms of size <= 1: error ~1e-6; a bf16 C adds one
        // rounding (2^-9 relative).
        const double rtol = cd == DType::BF16 ? test::kBf16Eps : 1e-5;
        EXPECT_CLOSE(to_double(c), expected, 1e-5, rtol)
            << "trans_a=" << ta << " trans_b=" << tb << " alpha=" << alpha << " beta=" << beta;
      }
}

TEST_P(GemmTest, BetaZeroIgnoresNaNInC) {
  const auto [ab, cd] = GetParam();
  Tensor a = random_tensor({5, 7}, ab, 1), b = random_tensor({7, 3}, ab, 2);
  Tensor c = from_double(std::vector<double>(15, std::nan("")), {5, 3}, cd);
  kernels::gemm(a, false, b, false, c);
  const auto expected = reference(to_double(a), false, to_double(b), false, {}, 5, 3, 7, 1, 0);
  EXPECT_CLOSE(to_double(c), expected, 1e-5, cd == DType::BF16 ? test::kBf16Eps : 1e-5);
}

TEST_P(GemmTest, StridedViews) {
  const auto [ab, cd] = GetParam();
  // Operands are column slices of wider buffers (row stride > columns), as per-head views.
  const int64_t m = 13, n = 11, k = 17;
  Tensor a_full = random_tensor({m, 40}, ab, 3), b_full = random_tensor({n, 30}, ab, 4);
  Tensor c_full = random_tensor({m, 25}, cd, 5);
  Tensor a = a_full.slice(1, 5, 5 + k);  // [m, k], lda 40
  Tensor b = b_full.slice(1, 2, 2 + k);  // [n, k], ldb 30 (used transposed)
  Tensor c = c_full.slice(1, 7, 7 + n);  // [m, n], ldc 25
  const auto expected =
      reference(to_double(a), false, to_double(b), true, to_double(c), m, n, k, 1.0, 1.0);
  const auto untouched_before = to_double(c_full.slice(1, 0, 7));
  kernels::gemm(a, false, b, true, c, 1.f, 1.f);
  EXPECT_CLOSE(to_double(c), expected, 1e-5, cd == DType::BF16 ? test::kBf16Eps : 1e-5);
  EXPECT_EQ(to_double(c_full.slice(1, 0, 7)), untouched_before) << "wrote outside the C view";
}

TEST_P(GemmTest, BatchedPerHeadViews) {
  const auto [ab, cd] = GetParam();
  // Attention scores: q, k are [b, s, heads, d] buffers; per (b, head) multiply [s, d]·[s, d]ᵀ.
  const int64_t bsz = 2, s = 7, heads = 3, d = 5;
  Tensor q = random_tensor({bsz, s, heads, d}, ab, 6),
         kt = random_tensor({bsz, s, heads, d}, ab, 7);
  // Head 1 of every sample: a 3-D view with batch stride s·heads·d and row stride heads·d.
  Tensor qv = q.select(2, 1);   // [b, s, d], strides [s·h·d, h·d, 1]
  Tensor kv = kt.select(2, 1);  // [b, s, d]
  Tensor scores = random_tensor({bsz, s, s}, cd, 8);
  std::vector<double> expected;
  for (int64_t i = 0; i < bsz; ++i) {
    auto e = reference(to_double(qv.select(0, i)), false, to_double(kv.select(0, i)), true,
                       to_double(scores.select(0, i)), s, s, d, 0.5, 0.0);
    expected.insert(expected.end(), e.begin(), e.end());
  }
  kernels::batched_gemm(qv, false, kv, true, scores, 0.5f, 0.f);
  EXPECT_CLOSE(to_double(scores), expected, 1e-5, cd == DType::BF16 ? test::kBf16Eps : 1e-5);

  // And back: context [b, s, d] = probs [b, s, s] · v [b, s, d] with transposed-A too.
  Tensor probs = random_tensor({bsz, s, s}, ab, 9);
  Tensor ctx = random_tensor({bsz, s, d}, cd, 10);
  std::vector<double> expected2;
  for (int64_t i = 0; i < bsz; ++i) {
    auto e = reference(to_double(probs.select(0, i)), true, to_double(kv.select(0, i)), false,
                       to_double(ctx.select(0, i)), s, d, s, 1.0, 1.0);
    expected2.insert(expected2.end(), e.begin(), e.end());
  }
  kernels::batched_gemm(probs, true, kv, false, ctx, 1.f, 1.f);
  EXPECT_CLOSE(to_double(ctx), expected2, 1e-5, cd == DType::BF16 ? test::kBf16Eps : 1e-5);
}

TEST_P(GemmTest, BatchedMegatronLayoutBatchStrideBelowRowStride) {
  // Activations [s, b, heads, d] (Megatron's layout): batch = (b, head) pairs with batch stride
  // d and row stride b·heads·d, i.e. the transposed view [b·heads, s, d] with no copy.
  const auto [ab, cd] = GetParam();
  const int64_t s = 6, bh = 4, d = 3;
  Tensor q = random_tensor({s, bh, d}, ab, 11), k = random_tensor({s, bh, d}, ab, 12);
  Tensor qv = q.transpose(0, 1), kv = k.transpose(0, 1);  // [bh, s, d], strides [d, bh·d, 1]
  Tensor scores = random_tensor({bh, s, s}, cd, 13);
  std::vector<double> expected;
  for (int64_t i = 0; i < bh; ++i) {
    auto e = reference(to_double(qv.select(0, i)), false, to_double(kv.select(0, i)), true,
                       to_double(scores.select(0, i)), s, s, d, 1.0, 0.5);
    expected.insert(expected.end(), e.begin(), e.end());
  }
  kernels::batched_gemm(qv, false, kv, true, scores, 1.f, 0.5f);
  EXPECT_CLOSE(to_double(scores), expected, 1e-5, cd == DType::BF16 ? test::kBf16Eps : 1e-5);
}

TEST_P(GemmTest, BatchedBroadcastOperand) {
  // One B shared by every batch entry through batch stride 0 (oneDNN has only its reference
  // kernel for that, so this runs the per-entry path when oneDNN is the backend).
  const auto [ab, cd] = GetParam();
  const int64_t batch = 3, m = 5, k = 4, n = 6;
  Tensor a = random_tensor({batch, m, k}, ab, 14);
  Tensor b2 = random_tensor({k, n}, ab, 15);
  Tensor b(b2.storage(), 0, {batch, k, n}, {0, n, 1}, ab);
  Tensor c = random_tensor({batch, m, n}, cd, 16);
  std::vector<double> expected;
  for (int64_t i = 0; i < batch; ++i) {
    auto e = reference(to_double(a.select(0, i)), false, to_double(b2), false, {}, m, n, k, 1, 0);
    expected.insert(expected.end(), e.begin(), e.end());
  }
  kernels::batched_gemm(a, false, b, false, c);
  EXPECT_CLOSE(to_double(c), expected, 1e-5, cd == DType::BF16 ? test::kBf16Eps : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GemmTest,
                         ::testing::Values(Case{DType::F32, DType::F32},
                                           Case{DType::BF16, DType::F32},
                                           Case{DType::BF16, DType::BF16}),
                         [](const auto& info) {
                           return std::string(dtype_name(info.param.ab)) + "_" +
                                  std::string(dtype_name(info.param.c));
                         });

TEST(Gemm, LargerThanOneBlockF32) {
  // Big enough that the backends' blocking and threading paths run (K beyond one panel).
  const int64_t m = 67, n = 129, k = 300;
  Tensor a = random_tensor({m, k}, DType::F32, 11), b = random_tensor({n, k}, DType::F32, 12);
  Tensor c = Tensor::zeros({m, n}, DType::F32);
  kernels::gemm(a, false, b, true, c);
  EXPECT_CLOSE(to_double(c), reference(to_double(a), false, to_double(b), true, {}, m, n, k, 1, 0),
               1e-4, 1e-5);
}

// f64 (the MoE router's --moe-router-dtype fp64): all three operands f64, accumulated in f64 —
// within a few ulps of the double loop, far below f32's precision; mixed dtypes are refused.
TEST(Gemm, F64AllTransposes) {
  const int64_t m = 13, n = 17, k = 33;
  int seed = 40;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [alpha, beta] :
           {std::pair{1.f, 0.f}, std::pair{1.f, 1.f}, std::pair{-2.f, 0.25f}}) {
        Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, DType::F64, seed++);
        Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::F64, seed++);
        Tensor c = random_tensor({m, n}, DType::F64, seed++);
        const std::vector<double> expected =
            reference(to_double(a), ta, to_double(b), tb, to_double(c), m, n, k, alpha, beta);
        kernels::gemm(a, ta, b, tb, c, alpha, beta);
        EXPECT_CLOSE(to_double(c), expected, 1e-13, 1e-13)
            << "trans_a=" << ta << " trans_b=" << tb << " alpha=" << alpha << " beta=" << beta;
      }
  Tensor a = Tensor::zeros({3, 4}, DType::F64), b = Tensor::zeros({4, 2}, DType::F64);
  Tensor c32 = Tensor::zeros({3, 2}, DType::F32);
  EXPECT_THROW(kernels::gemm(a, false, b, false, c32), Error);
  EXPECT_THROW(kernels::gemm(a, false, Tensor::zeros({4, 2}, DType::F32), false, c32), Error);
}

TEST(Gemm, EmptyInnerDimensionScalesC) {
  Tensor a = Tensor::zeros({3, 0}, DType::F32), b = Tensor::zeros({0, 2}, DType::F32);
  Tensor c = from_double({1, 2, 3, 4, 5, 6}, {3, 2}, DType::F32);
  kernels::gemm(a, false, b, false, c, 1.f, 0.5f);
  EXPECT_EQ(to_double(c), (std::vector<double>{0.5, 1, 1.5, 2, 2.5, 3}));
}

TEST(Gemm, RejectsBadOperands) {
  Tensor a = Tensor::zeros({3, 4}, DType::F32), b = Tensor::zeros({5, 2}, DType::F32);
  Tensor c = Tensor::zeros({3, 2}, DType::F32);
  EXPECT_THROW(kernels::gemm(a, false, b, false, c), Error);  // K 4 vs 5
  Tensor bh = Tensor::zeros({4, 2}, DType::BF16);
  EXPECT_THROW(kernels::gemm(a, false, bh, false, c), Error);  // mixed dtypes
  Tensor wide = Tensor::zeros({4, 4}, DType::F32);
  Tensor col = wide.transpose(0, 1).slice(1, 0, 2);  // inner stride 4
  EXPECT_THROW(kernels::gemm(a, false, col, false, c), Error);
  Tensor c_bad = Tensor::zeros({3, 3}, DType::F32);
  EXPECT_THROW(kernels::gemm(a, false, wide.slice(1, 0, 2), false, c_bad), Error);
  try {
    kernels::gemm(a, false, b, false, c);
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("inner dimensions"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace megatron
