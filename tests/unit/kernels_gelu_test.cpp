// Bias + GeLU against the tanh formula in double; backward against central differences.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/gelu.h"

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
    y[i] = 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
  }
  return y;
}

class GeluTest : public ::testing::TestWithParam<DType> {};

TEST_P(GeluTest, ForwardMatchesDoubleFormula) {
  const DType dt = GetParam();
  const int64_t n = 13, c = 17;
  Tensor x = random_tensor({n, c}, dt, 1, -4.0, 4.0), bias = random_tensor({c}, dt, 2);
  Tensor y = Tensor::empty({n, c}, dt);
  kernels::bias_gelu_forward(x, bias, y);
  EXPECT_CLOSE(to_double(y), reference(to_double(x), to_double(bias), c), 1e-6,
               dt == DType::BF16 ? test::kBf16Eps : 1e-5);
}

TEST_P(GeluTest, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  const int64_t n = 11, c = 7;
  Tensor x = random_tensor({n, c}, dt, 3, -3.0, 3.0), bias = random_tensor({c}, dt, 4);
  Tensor dy = random_tensor({n, c}, dt, 5);
  const auto xd = to_double(x), bd = to_double(bias), w = to_double(dy);
  Tensor dx = Tensor::empty({n, c}, dt);
  Tensor dbias = from_double(std::vector<double>(size_t(c), 0.5), {c}, DType::F32);
  kernels::bias_gelu_backward(dy, x, bias, dx, dbias);
  auto loss_x = [&](const std::vector<double>& v) { return test::dot(w, reference(v, bd, c)); };
  auto loss_b = [&](const std::vector<double>& v) { return test::dot(w, reference(xd, v, c)); };
  EXPECT_CLOSE(to_double(dx), test::numeric_grad(loss_x, xd), 1e-5,
               dt == DType::BF16 ? test::kBf16Eps : 1e-4);
  auto db = test::numeric_grad(loss_b, bd);
  for (auto& v : db) v += 0.5;  // accumulated onto the initial 0.5
  EXPECT_CLOSE(to_double(dbias), db, 1e-4, 1e-4);
}

TEST_P(GeluTest, WithoutBias) {
  const DType dt = GetParam();
  Tensor x = random_tensor({5, 3}, dt, 6, -3.0, 3.0), y = Tensor::empty({5, 3}, dt);
  kernels::bias_gelu_forward(x, Tensor(), y);
  EXPECT_CLOSE(to_double(y), reference(to_double(x), std::vector<double>(3, 0.0), 3), 1e-6,
               dt == DType::BF16 ? test::kBf16Eps : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GeluTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Gelu, RejectsBiasOfWrongDtype) {
  Tensor x = Tensor::zeros({2, 3}, DType::BF16), bias = Tensor::zeros({3}, DType::F32);
  Tensor y = Tensor::zeros({2, 3}, DType::BF16);
  EXPECT_THROW(kernels::bias_gelu_forward(x, bias, y), Error);
}

}  // namespace
}  // namespace megatron
