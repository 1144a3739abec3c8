// Bias + squared ReLU against its formula in double, relu(u)², u = x + bias; the backward
// against central differences (away from the kink at 0), with and without a bias.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/squared_relu.h"

namespace megatron {
namespace {

using test::from_double;
using test::random_tensor;
using test::to_double;

std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& bias,
                              int64_t c) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = x[i] + bias[i % size_t(c)];
    y[i] = u > 0 ? u * u : 0.0;
  }
  return y;
}

// Values at least `gap` away from -bias, so the central differences never straddle the kink.
std::vector<double> off_the_kink(std::vector<double> x, const std::vector<double>& bias, int64_t c,
                                 double gap) {
  for (size_t i = 0; i < x.size(); ++i) {
    const double u = x[i] + bias[i % size_t(c)];
    if (std::abs(u) < gap) x[i] += u >= 0 ? gap : -gap;
  }
  return x;
}

class SquaredReluTest : public ::testing::TestWithParam<DType> {};

TEST_P(SquaredReluTest, ForwardMatchesDoubleFormula) {
  const DType dt = GetParam();
  const int64_t n = 13, c = 17;
  Tensor x = random_tensor({n, c}, dt, 1, -4.0, 4.0), bias = random_tensor({c}, dt, 2);
  Tensor y = Tensor::empty({n, c}, dt);
  kernels::bias_squared_relu_forward(x, bias, y);
  EXPECT_CLOSE(to_double(y), reference(to_double(x), to_double(bias), c), 1e-6,
               dt == DType::BF16 ? test::kBf16Eps : 1e-6);
  Tensor y0 = Tensor::empty({n, c}, dt);
  kernels::bias_squared_relu_forward(x, Tensor(), y0);
  EXPECT_CLOSE(to_double(y0), reference(to_double(x), std::vector<double>(size_t(c), 0.0), c), 1e-6,
               dt == DType::BF16 ? test::kBf16Eps : 1e-6);
}

TEST_P(SquaredReluTest, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  const int64_t n = 11, c = 7;
  const Tensor bias = random_tensor({c}, dt, 4);
  const auto bd = to_double(bias);
  const Tensor x = from_double(
      off_the_kink(to_double(random_tensor({n, c}, dt, 3, -3.0, 3.0)), bd, c, 0.05), {n, c}, dt);
  const Tensor dy = random_tensor({n, c}, dt, 5);
  const auto xd = to_double(x), w = to_double(dy);
  Tensor dx = Tensor::empty({n, c}, dt);
  Tensor dbias = from_double(std::vector<double>(size_t(c), 0.5), {c}, DType::F32);
  kernels::bias_squared_relu_backward(dy, x, bias, dx, dbias);
  auto loss_x = [&](const std::vector<double>& v) { return test::dot(w, reference(v, bd, c)); };
  auto loss_b = [&](const std::vector<double>& v) { return test::dot(w, reference(xd, v, c)); };
  EXPECT_CLOSE(to_double(dx), test::numeric_grad(loss_x, xd), 1e-5,
               dt == DType::BF16 ? test::kBf16Eps : 1e-4);
  auto db = test::numeric_grad(loss_b, bd);
  for (auto& v : db) v += 0.5;  // accumulated onto the initial 0.5
  EXPECT_CLOSE(to_double(dbias), db, 1e-4, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SquaredReluTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(SquaredRelu, RejectsMismatchedOperands) {
  Tensor x = Tensor::zeros({2, 3}, DType::F32), y = Tensor::zeros({2, 4}, DType::F32);
  EXPECT_THROW(kernels::bias_squared_relu_forward(x, Tensor(), y), Error);
  Tensor bias = Tensor::zeros({3}, DType::BF16), y2 = Tensor::zeros({2, 3}, DType::F32);
  EXPECT_THROW(kernels::bias_squared_relu_forward(x, bias, y2), Error);
}

}  // namespace
}  // namespace megatron
