// LayerNorm forward against a double-precision loop; backward against central finite
// differences of that loop (loss = Σ w ⊙ y with random w, so dy = w).
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/layernorm.h"

namespace megatron {
namespace {

using test::from_double;
using test::random_tensor;
using test::to_double;

constexpr float kEps = 1e-5f;

// y [N, C] = (x − mean) / sqrt(var + eps) · gamma + beta, biased variance, in double.
std::vector<double> reference(const std::vector<double>& x, const std::vector<double>& gamma,
                              const std::vector<double>& beta, int64_t n, int64_t c) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < c; ++j) mean += x[size_t(r * c + j)];
    mean /= double(c);
    for (int64_t j = 0; j < c; ++j) var += std::pow(x[size_t(r * c + j)] - mean, 2);
    var /= double(c);
    for (int64_t j = 0; j < c; ++j)
      y[size_t(r * c + j)] =
          (x[size_t(r * c + j)] - mean) / std::sqrt(var + kEps) * gamma[size_t(j)] +
          beta[size_t(j)];
  }
  return y;
}

class LayerNormTest : public ::testing::TestWithParam<DType> {};

TEST_P(LayerNormTest, ForwardMatchesDoubleLoop) {
  const DType dt = GetParam();
  const int64_t n = 13, c = 17 * 3;
  // Offset the inputs (mean ~4) so a one-pass E[x²] − E[x]² variance would lose digits.
  Tensor x = random_tensor({n, c}, dt, 1, 3.0, 5.0);
  Tensor gamma = random_tensor({c}, DType::F32, 2), beta = random_tensor({c}, DType::F32, 3);
  Tensor y = Tensor::empty({n, c}, dt), mean = Tensor::empty({n}, DType::F32),
         rstd = Tensor::empty({n}, DType::F32);
  kernels::layernorm_forward(x, gamma, beta, kEps, y, mean, rstd);
  const auto xd = to_double(x);
  const auto expected = reference(xd, to_double(gamma), to_double(beta), n, c);
  EXPECT_CLOSE(to_double(y), expected, 1e-4, dt == DType::BF16 ? test::kBf16Eps : 1e-5);
  for (int64_t r = 0; r < n; ++r) {
    double mu = 0;
    for (int64_t j = 0; j < c; ++j) mu += xd[size_t(r * c + j)];
    EXPECT_NEAR(mean.data<float>()[r], mu / double(c), 1e-5);
  }
}

TEST_P(LayerNormTest, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  const int64_t n = 11, c = 13;
  Tensor x = random_tensor({n, c}, dt, 4, -2.0, 2.0);
  Tensor gamma = random_tensor({c}, DType::F32, 5), beta = random_tensor({c}, DType::F32, 6);
  Tensor dy = random_tensor({n, c}, dt, 7);
  const auto xd = to_double(x), gd = to_double(gamma), bd = to_double(beta), w = to_double(dy);

  Tensor y = Tensor::empty({n, c}, dt), mean = Tensor::empty({n}, DType::F32),
         rstd = Tensor::empty({n}, DType::F32);
  kernels::layernorm_forward(x, gamma, beta, kEps, y, mean, rstd);
  Tensor dx = Tensor::empty({n, c}, dt);
  // dgamma/dbeta start non-zero: the kernel must accumulate.
  Tensor dgamma = from_double(std::vector<double>(size_t(c), 1.0), {c}, DType::F32);
  Tensor dbeta = from_double(std::vector<double>(size_t(c), -1.0), {c}, DType::F32);
  kernels::layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta);

  auto loss_x = [&](const std::vector<double>& v) {
    return test::dot(w, reference(v, gd, bd, n, c));
  };
  auto loss_g = [&](const std::vector<double>& v) {
    return test::dot(w, reference(xd, v, bd, n, c));
  };
  auto loss_b = [&](const std::vector<double>& v) {
    return test::dot(w, reference(xd, gd, v, n, c));
  };
  const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-4;
  EXPECT_CLOSE(to_double(dx), test::numeric_grad(loss_x, xd), 1e-4, rtol);
  auto dg_expected = test::numeric_grad(loss_g, gd);
  auto db_expected = test::numeric_grad(loss_b, bd);
  for (auto& v : dg_expected) v += 1.0;
  for (auto& v : db_expected) v -= 1.0;
  EXPECT_CLOSE(to_double(dgamma), dg_expected, 1e-4, 1e-4);
  EXPECT_CLOSE(to_double(dbeta), db_expected, 1e-4, 1e-4);

  // beta_dx = 1 adds onto what dx holds (the residual stream's gradient).
  Tensor dx_acc = random_tensor({n, c}, dt, 8);
  const auto before = to_double(dx_acc), dx_once = to_double(dx);
  kernels::layernorm_backward(dy, x, gamma, mean, rstd, dx_acc, dgamma, dbeta, 1.f);
  const auto after = to_double(dx_acc);
  // bf16: dx_once was rounded on its own and the sum is rounded once more.
  const double rel = dt == DType::BF16 ? test::kBf16Eps : 1e-6;
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_NEAR(after[i], before[i] + dx_once[i],
                rel * (std::abs(before[i]) + 2 * std::abs(dx_once[i])) + 1e-6)
        << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerNormTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(LayerNorm, RejectsMismatchedShapes) {
  Tensor x = Tensor::zeros({3, 4}, DType::F32), g = Tensor::zeros({5}, DType::F32);
  Tensor y = Tensor::zeros({3, 4}, DType::F32), s = Tensor::zeros({3}, DType::F32);
  try {
    kernels::layernorm_forward(x, g, g, kEps, y, s, s);
    ADD_FAILURE() << "no error for gamma [5] with C = 4";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("gamma"), std::string::npos) << e.message();
  }
  Tensor xi = Tensor::zeros({3, 4}, DType::I32);
  Tensor g4 = Tensor::zeros({4}, DType::F32);
  EXPECT_THROW(kernels::layernorm_forward(xi, g4, g4, kEps, y, s, s), Error);
}

}  // namespace
}  // namespace megatron
