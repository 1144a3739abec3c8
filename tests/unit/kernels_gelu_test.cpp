// Bias + GeLU in both forms against their formulas in double (erf: std::erf; tanh: the
// approximation); backward against central differences.
#include <gtest/gtest.h>

#include <tuple>

#include "kernel_test_util.h"
#include "kernels/gelu.h"

namespace megatron {
namespace {

using kernels::GeluForm;
using test::from_double;
using test::random_tensor;
using test::to_double;

double gelu_reference(double u, GeluForm form) {
  if (form == GeluForm::kErf) return 0.5 * u * (1 + std::erf(u / std::sqrt(2.0)));
  return 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
}

std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& bias,
                              int64_t c, GeluForm form) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = gelu_reference(x[i] + bias[i % size_t(c)], form);
  return y;
}

class GeluTest : public ::testing::TestWithParam<std::tuple<DType, GeluForm>> {};

TEST_P(GeluTest, ForwardMatchesDoubleFormula) {
  const auto [dt, form] = GetParam();
  const int64_t n = 13, c = 17;
  Tensor x = random_tensor({n, c}, dt, 1, -4.0, 4.0), bias = random_tensor({c}, dt, 2);
  Tensor y = Tensor::empty({n, c}, dt);
  kernels::bias_gelu_forward(x, bias, y, form);
  EXPECT_CLOSE(to_double(y), reference(to_double(x), to_double(bias), c, form), 1e-6,
               dt == DType::BF16 ? test::kBf16Eps : 1e-5);
}

TEST_P(GeluTest, BackwardMatchesFiniteDifferences) {
  const auto [dt, form] = GetParam();
  const int64_t n = 11, c = 7;
  Tensor x = random_tensor({n, c}, dt, 3, -3.0, 3.0), bias = random_tensor({c}, dt, 4);
  Tensor dy = random_tensor({n, c}, dt, 5);
  const auto xd = to_double(x), bd = to_double(bias), w = to_double(dy);
  Tensor dx = Tensor::empty({n, c}, dt);
  Tensor dbias = from_double(std::vector<double>(size_t(c), 0.5), {c}, DType::F32);
  kernels::bias_gelu_backward(dy, x, bias, dx, dbias, form);
  auto loss_x = [&](const std::vector<double>& v) {
    return test::dot(w, reference(v, bd, c, form));
  };
  auto loss_b = [&](const std::vector<double>& v) {
    return test::dot(w, reference(xd, v, c, form));
  };
  EXPECT_CLOSE(to_double(dx), test::numeric_grad(loss_x, xd), 1e-5,
               dt == DType::BF16 ? test::kBf16Eps : 1e-4);
  auto db = test::numeric_grad(loss_b, bd);
  for (auto& v : db) v += 0.5;  // accumulated onto the initial 0.5
  EXPECT_CLOSE(to_double(dbias), db, 1e-4, 1e-4);
}

TEST_P(GeluTest, WithoutBias) {
  const auto [dt, form] = GetParam();
  Tensor x = random_tensor({5, 3}, dt, 6, -3.0, 3.0), y = Tensor::empty({5, 3}, dt);
  kernels::bias_gelu_forward(x, Tensor(), y, form);
  EXPECT_CLOSE(to_double(y), reference(to_double(x), std::vector<double>(3, 0.0), 3, form), 1e-6,
               dt == DType::BF16 ? test::kBf16Eps : 1e-5);
}

INSTANTIATE_TEST_SUITE_P(DtypesAndForms, GeluTest,
                         ::testing::Combine(::testing::Values(DType::F32, DType::BF16),
                                            ::testing::Values(GeluForm::kErf, GeluForm::kTanh)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_" +
                                  kernels::gelu_form_name(std::get<1>(info.param));
                         });

// The f32 tolerances above resolve the two forms: at u = ±1 they differ by 1.5e-4, over ten
// times the 1e-6 + 1e-5·|y| allowed.
TEST(Gelu, FormsDifferByMoreThanTheTolerance) {
  Tensor x = from_double({-1.0, 1.0}, {1, 2}, DType::F32);
  Tensor erf = Tensor::empty({1, 2}, DType::F32), tanh = Tensor::empty({1, 2}, DType::F32);
  kernels::bias_gelu_forward(x, Tensor(), erf, GeluForm::kErf);
  kernels::bias_gelu_forward(x, Tensor(), tanh, GeluForm::kTanh);
  for (int i = 0; i < 2; ++i) {
    const double e = to_double(erf)[i], t = to_double(tanh)[i];
    EXPECT_GT(std::abs(e - t), 10 * (1e-6 + 1e-5 * std::abs(e))) << i;
  }
}

TEST(Gelu, RejectsBiasOfWrongDtype) {
  Tensor x = Tensor::zeros({2, 3}, DType::BF16), bias = Tensor::zeros({3}, DType::F32);
  Tensor y = Tensor::zeros({2, 3}, DType::BF16);
  EXPECT_THROW(kernels::bias_gelu_forward(x, bias, y, GeluForm::kErf), Error);
}

}  // namespace
}  // namespace megatron
