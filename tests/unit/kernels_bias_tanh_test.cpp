// bias_tanh forward/backward against a naive double loop, its backward against central finite
// differences of the double forward, and the bf16 path against the f32 one.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/philox.h"
#include "kernels/bias_tanh.h"

namespace megatron {
namespace {

std::vector<float> random_values(int64_t n, uint64_t key, float scale) {
  PhiloxStream s(7, key);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = scale * s.normal(uint64_t(i));
  return v;
}

constexpr int64_t kRows = 13, kCols = 17;

TEST(BiasTanh, ForwardMatchesDoubleLoop) {
  auto x = random_values(kRows * kCols, 1, 1.5f), b = random_values(kCols, 2, 0.5f);
  Tensor tx = Tensor::from_vector(x, {kRows, kCols}), tb = Tensor::from_vector(b, {kCols});
  Tensor ty = Tensor::empty({kRows, kCols}, DType::F32);
  kernels::bias_tanh_forward(tx, tb, ty);
  auto y = ty.to_vector<float>();
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) {
      double want = std::tanh(double(x[r * kCols + c]) + double(b[c]));
      EXPECT_NEAR(y[r * kCols + c], want, 1e-6) << r << "," << c;
    }
}

TEST(BiasTanh, BackwardMatchesFiniteDifferences) {
  auto x = random_values(kRows * kCols, 3, 1.5f), b = random_values(kCols, 4, 0.5f);
  auto dy = random_values(kRows * kCols, 5, 1.0f);
  Tensor tx = Tensor::from_vector(x, {kRows, kCols}), tb = Tensor::from_vector(b, {kCols});
  Tensor ty = Tensor::empty({kRows, kCols}, DType::F32);
  kernels::bias_tanh_forward(tx, tb, ty);
  Tensor tdy = Tensor::from_vector(dy, {kRows, kCols});
  Tensor tdx = Tensor::empty({kRows, kCols}, DType::F32);
  std::vector<float> db0(kCols, 0.25f);  // accumulation: the kernel must add, not overwrite
  Tensor tdb = Tensor::from_vector(db0, {kCols});
  kernels::bias_tanh_backward(tdy, ty, tdx, tdb);
  auto dx = tdx.to_vector<float>(), db = tdb.to_vector<float>();

  // L(x, b) = Σ dy · tanh(x + b) in double; d/dx and d/db by central differences.
  auto loss = [&](int64_t xi, int64_t bi, double eps) {
    double s = 0;
    for (int64_t r = 0; r < kRows; ++r)
      for (int64_t c = 0; c < kCols; ++c) {
        double u = double(x[r * kCols + c]) + double(b[c]);
        if (r * kCols + c == xi || c == bi) u += eps;
        s += double(dy[r * kCols + c]) * std::tanh(u);
      }
    return s;
  };
  const double eps = 1e-5;
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    double fd = (loss(i, -1, eps) - loss(i, -1, -eps)) / (2 * eps);
    EXPECT_NEAR(dx[size_t(i)], fd, 1e-4 * (1 + std::fabs(fd))) << "dx " << i;
  }
  for (int64_t c = 0; c < kCols; ++c) {
    double fd = (loss(-1, c, eps) - loss(-1, c, -eps)) / (2 * eps);
    EXPECT_NEAR(db[size_t(c)] - 0.25f, fd, 1e-4 * (1 + std::fabs(fd))) << "dbias " << c;
  }
}

TEST(BiasTanh, Bf16FollowsF32WithinBf16Rounding) {
  auto x = random_values(kRows * kCols, 6, 1.5f);
  Tensor tx = Tensor::from_vector(x, {kRows, kCols});
  Tensor xb = Tensor::empty({kRows, kCols}, DType::BF16);
  for (int64_t i = 0; i < kRows * kCols; ++i) xb.data<bf16>()[i] = bf16(x[size_t(i)]);
  Tensor yb = Tensor::empty({kRows, kCols}, DType::BF16);
  kernels::bias_tanh_forward(xb, Tensor(), yb);
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    double want = std::tanh(double(float(xb.data<bf16>()[i])));
    EXPECT_NEAR(float(yb.data<bf16>()[i]), want, 4e-3 * (1 + std::fabs(want))) << i;
  }
}

TEST(BiasTanh, RejectsMismatchedShapes) {
  Tensor x = Tensor::zeros({3, 4}, DType::F32), y = Tensor::zeros({3, 5}, DType::F32);
  EXPECT_THROW(kernels::bias_tanh_forward(x, Tensor(), y), Error);
  Tensor i = Tensor::zeros({3, 4}, DType::I32), yi = Tensor::zeros({3, 4}, DType::I32);
  EXPECT_THROW(kernels::bias_tanh_forward(i, Tensor(), yi), Error);
}

}  // namespace
}  // namespace megatron
