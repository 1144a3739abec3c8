// RMSNorm forward against a double-precision loop; backward against central finite
// differences of that loop (loss = Σ w ⊙ y with random w, so dy = w).
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/rmsnorm.h"

namespace megatron {
namespace {

using test::from_double;
using test::random_tensor;
using test::to_double;

constexpr float kEps = 1e-6f;

// y [N, C] = x / sqrt(mean(x²) + eps) · gamma, in double.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& gamma,
                              int64_t n, int64_t c) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < c; ++j) ms += x[size_t(r * c + j)] * x[size_t(r * c + j)];
    ms /= double(c);
    for (int64_t j = 0; j < c; ++j)
      y[size_t(r * c + j)] = x[size_t(r * c + j)] / std::sqrt(ms + kEps) * gamma[size_t(j)];
  }
  return y;
}

class RmsNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(RmsNormTest, ForwardMatchesDoubleLoop) {
  const DType dt = GetParam();
  const int64_t n = 13, c = 17 * 3;
  Tensor x = random_tensor({n, c}, dt, 1, -3.0, 5.0);
  Tensor gamma = random_tensor({c}, DType::F32, 2);
  Tensor y = Tensor::empty({n, c}, dt), rstd = Tensor::empty({n}, DType::F32);
  kernels::rmsnorm_forward(x, gamma, kEps, y, rstd);
  const auto xd = to_double(x);
  EXPECT_CLOSE(to_double(y), reference(xd, to_double(gamma), n, c), 1e-5,
               dt == DType::BF16 ? test::kBf16Eps : 1e-5);
  for (int64_t r = 0; r < n; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < c; ++j) ms += xd[size_t(r * c + j)] * xd[size_t(r * c + j)];
    EXPECT_NEAR(rstd.data<float>()[r], 1.0 / std::sqrt(ms / double(c) + kEps),
                1e-6 / std::sqrt(ms / double(c)));
  }
}

TEST_P(RmsNormTest, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  const int64_t n = 11, c = 13;
  Tensor x = random_tensor({n, c}, dt, 4, -2.0, 2.0);
  Tensor gamma = random_tensor({c}, DType::F32, 5);
  Tensor dy = random_tensor({n, c}, dt, 7);
  const auto xd = to_double(x), gd = to_double(gamma), w = to_double(dy);

  Tensor y = Tensor::empty({n, c}, dt), rstd = Tensor::empty({n}, DType::F32);
  kernels::rmsnorm_forward(x, gamma, kEps, y, rstd);
  Tensor dx = Tensor::empty({n, c}, dt);
  // dgamma starts non-zero: the kernel must accumulate.
  Tensor dgamma = from_double(std::vector<double>(size_t(c), 1.0), {c}, DType::F32);
  kernels::rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma);

  auto loss_x = [&](const std::vector<double>& v) { return test::dot(w, reference(v, gd, n, c)); };
  auto loss_g = [&](const std::vector<double>& v) { return test::dot(w, reference(xd, v, n, c)); };
  const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-4;
  EXPECT_CLOSE(to_double(dx), test::numeric_grad(loss_x, xd), 1e-4, rtol);
  auto dg_expected = test::numeric_grad(loss_g, gd);
  for (auto& v : dg_expected) v += 1.0;
  EXPECT_CLOSE(to_double(dgamma), dg_expected, 1e-4, 1e-4);

  // beta_dx = 1 adds onto what dx holds (the residual stream's gradient).
  Tensor dx_acc = random_tensor({n, c}, dt, 8);
  const auto before = to_double(dx_acc), dx_once = to_double(dx);
  kernels::rmsnorm_backward(dy, x, gamma, rstd, dx_acc, dgamma, 1.f);
  const auto after = to_double(dx_acc);
  const double rel = dt == DType::BF16 ? test::kBf16Eps : 1e-6;
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_NEAR(after[i], before[i] + dx_once[i],
                rel * (std::abs(before[i]) + 2 * std::abs(dx_once[i])) + 1e-6)
        << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RmsNormTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(RmsNorm, RejectsMismatchedShapes) {
  Tensor x = Tensor::zeros({3, 4}, DType::F32), g = Tensor::zeros({5}, DType::F32);
  Tensor y = Tensor::zeros({3, 4}, DType::F32), s = Tensor::zeros({3}, DType::F32);
  try {
    kernels::rmsnorm_forward(x, g, kEps, y, s);
    ADD_FAILURE() << "no error for gamma [5] with C = 4";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("gamma"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace megatron
