// Dropout masks: agreement with PhiloxStream draw by draw, keep-rate statistics, exact
// regeneration, row independence; and the kernels that apply masks, against double loops.
#include <gtest/gtest.h>

#include "core/philox.h"
#include "kernel_test_util.h"
#include "kernels/dropout.h"

namespace megatron {
namespace {

using kernels::MaskRow;
using test::random_tensor;
using test::to_double;

std::vector<uint8_t> make_mask(uint64_t seed, const std::vector<MaskRow>& rows, int64_t cols,
                               float p) {
  Tensor m = Tensor::empty({int64_t(rows.size()), cols}, DType::U8);
  kernels::dropout_mask(seed, rows, p, m);
  return m.to_vector<uint8_t>();
}

TEST(DropoutMask, MatchesPhiloxStreamUniform) {
  // Unaligned counter bases exercise the partial first and last Philox blocks.
  const std::vector<MaskRow> rows = {{7, 0}, {8, 3}, {philox_key({1, 2, 3}), 1001}};
  const int64_t cols = 37;
  const float p = 0.3f;
  const auto mask = make_mask(42, rows, cols, p);
  for (size_t r = 0; r < rows.size(); ++r) {
    PhiloxStream s(42, rows[r].key);
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_EQ(mask[r * size_t(cols) + size_t(c)],
                s.uniform(rows[r].counter_base + uint64_t(c)) >= p)
          << "row " << r << " col " << c;
  }
}

TEST(DropoutMask, KeepRateMatchesProbability) {
  for (float p : {0.1f, 0.5f, 0.9f}) {
    std::vector<MaskRow> rows;
    for (uint64_t r = 0; r < 64; ++r) rows.push_back({philox_key({r}), r * 1000});
    const int64_t cols = 1000;
    const auto mask = make_mask(1234, rows, cols, p);
    double kept = 0;
    for (uint8_t m : mask) kept += m;
    const double n = double(mask.size()), rate = kept / n;
    // 64k Bernoulli draws: standard deviation sqrt(p(1-p)/n) <= 0.002; allow 5 sigma.
    EXPECT_NEAR(rate, 1.0 - p, 5 * std::sqrt(p * (1 - p) / n)) << "p=" << p;
  }
}

TEST(DropoutMask, ZeroProbabilityKeepsAll) {
  const auto mask = make_mask(1, {{1, 0}, {2, 5}}, 9, 0.f);
  for (uint8_t m : mask) EXPECT_EQ(m, 1);
}

TEST(DropoutMask, RegeneratesExactlyAndRowsAreIndependent) {
  const std::vector<MaskRow> rows = {{11, 0}, {12, 64}, {13, 7}, {14, 1 << 20}};
  const int64_t cols = 29;
  const auto first = make_mask(99, rows, cols, 0.5f);
  EXPECT_EQ(make_mask(99, rows, cols, 0.5f), first);
  // Row 2 alone, in a call with other rows around it, gives the same bits.
  const auto alone = make_mask(99, {rows[2]}, cols, 0.5f);
  const auto mixed = make_mask(99, {{500, 3}, rows[2]}, cols, 0.5f);
  for (int64_t c = 0; c < cols; ++c) {
    EXPECT_EQ(alone[size_t(c)], first[size_t(2 * cols + c)]);
    EXPECT_EQ(mixed[size_t(cols + c)], first[size_t(2 * cols + c)]);
  }
  // A different seed or key changes the mask.
  EXPECT_NE(make_mask(100, rows, cols, 0.5f), first);
  EXPECT_NE(make_mask(99, {{15, 0}}, cols, 0.5f),
            std::vector<uint8_t>(first.begin(), first.begin() + cols));
}

TEST(DropoutMask, RejectsBadArguments) {
  Tensor m = Tensor::empty({2, 3}, DType::U8);
  EXPECT_THROW(kernels::dropout_mask(1, {{1, 0}}, 0.5f, m), Error);  // 1 key for 2 rows
  EXPECT_THROW(kernels::dropout_mask(1, {{1, 0}, {2, 0}}, 1.0f, m), Error);
  Tensor f = Tensor::empty({2, 3}, DType::F32);
  EXPECT_THROW(kernels::dropout_mask(1, {{1, 0}, {2, 0}}, 0.5f, f), Error);
}

class DropoutApplyTest : public ::testing::TestWithParam<DType> {};

TEST_P(DropoutApplyTest, ForwardAndBackwardScaleKeptElements) {
  const DType dt = GetParam();
  const int64_t n = 13, c = 11;
  const float p = 0.25f;
  Tensor mask = Tensor::empty({n, c}, DType::U8);
  std::vector<MaskRow> rows;
  for (uint64_t r = 0; r < uint64_t(n); ++r) rows.push_back({r, 0});
  kernels::dropout_mask(5, rows, p, mask);
  const auto md = mask.to_vector<uint8_t>();
  Tensor x = random_tensor({n, c}, dt, 1), y = Tensor::empty({n, c}, dt);
  kernels::dropout_forward(x, mask, p, y);
  const auto xd = to_double(x);
  std::vector<double> expected(xd.size());
  for (size_t i = 0; i < xd.size(); ++i) expected[i] = md[i] ? xd[i] / (1 - p) : 0.0;
  const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-6;
  EXPECT_CLOSE(to_double(y), expected, 0.0 + 1e-12, rtol);
  Tensor dx = Tensor::empty({n, c}, dt);
  kernels::dropout_backward(x, mask, p, dx);  // same formula on dy = x
  EXPECT_CLOSE(to_double(dx), expected, 1e-12, rtol);
}

TEST_P(DropoutApplyTest, BiasDropoutAdd) {
  const DType dt = GetParam();
  const int64_t n = 7, c = 13;
  const float p = 0.4f;
  Tensor mask = Tensor::empty({n, c}, DType::U8);
  std::vector<MaskRow> rows;
  for (uint64_t r = 0; r < uint64_t(n); ++r) rows.push_back({r + 100, r * 13});
  kernels::dropout_mask(9, rows, p, mask);
  const auto md = mask.to_vector<uint8_t>();
  Tensor x = random_tensor({n, c}, dt, 2), bias = random_tensor({c}, dt, 3),
         res = random_tensor({n, c}, dt, 4);
  const auto xd = to_double(x), bd = to_double(bias), rd = to_double(res);
  const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-6;

  Tensor y = Tensor::empty({n, c}, dt);
  kernels::bias_dropout_add_forward(x, bias, res, mask, p, y);
  std::vector<double> expected(xd.size()), expected_nodrop(xd.size());
  for (size_t i = 0; i < xd.size(); ++i) {
    const double u = xd[i] + bd[i % size_t(c)];
    expected[i] = rd[i] + (md[i] ? u / (1 - p) : 0.0);
    expected_nodrop[i] = rd[i] + u;
  }
  EXPECT_CLOSE(to_double(y), expected, 1e-6, rtol);
  kernels::bias_dropout_add_forward(x, bias, res, Tensor(), p, y);  // no mask: no dropout
  EXPECT_CLOSE(to_double(y), expected_nodrop, 1e-6, rtol);

  // Backward: dx = mask·dy/(1-p); dbias += Σ_rows dx.
  Tensor dy = random_tensor({n, c}, dt, 5), dx = Tensor::empty({n, c}, dt);
  Tensor dbias = Tensor::zeros({c}, DType::F32);
  kernels::bias_dropout_add_backward(dy, mask, p, dx, dbias);
  const auto dyd = to_double(dy);
  std::vector<double> dx_expected(dyd.size()), db_expected(size_t(c), 0.0);
  for (size_t i = 0; i < dyd.size(); ++i) {
    dx_expected[i] = md[i] ? dyd[i] / (1 - p) : 0.0;
    db_expected[i % size_t(c)] += dx_expected[i];
  }
  EXPECT_CLOSE(to_double(dx), dx_expected, 1e-6, rtol);
  EXPECT_CLOSE(to_double(dbias), db_expected, 1e-5, 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, DropoutApplyTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace megatron
