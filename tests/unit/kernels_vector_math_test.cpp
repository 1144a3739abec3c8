// The vectorisable exp and GeLU (tanh and erf forms) helpers the CPU kernels use, against libm
// in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/vector_math.h"

namespace megatron {
namespace {

using kernels::cpu::exp_approx;

TEST(VectorMath, ExpWithinFewUlpOverTheWholeRange) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.00123) {
    const float xf = float(x);
    const double ref = std::exp(double(xf));
    worst = std::max(worst, std::abs(double(exp_approx(xf)) - ref) / ref);
  }
  EXPECT_LT(worst, 3 * 0x1p-24) << "max relative error " << worst;  // under 3 ulp
}

TEST(VectorMath, ExpSpecialValues) {
  EXPECT_EQ(exp_approx(0.f), 1.f);
  EXPECT_EQ(exp_approx(-std::numeric_limits<float>::infinity()), 0.f);
  EXPECT_EQ(exp_approx(-100.f), 0.f);
  EXPECT_TRUE(std::isnan(exp_approx(std::nanf(""))));
  EXPECT_TRUE(std::isfinite(exp_approx(1000.f)));
}

TEST(VectorMath, GeluAndGradientMatchTanhFormula) {
  for (double u = -12; u <= 12; u += 0.01) {
    const double z = std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u);
    const double t = std::tanh(z);
    const double gelu = 0.5 * u * (1 + t);
    const double grad =
        0.5 * (1 + t) + 0.5 * u * (1 - t * t) * std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * u * u);
    EXPECT_NEAR(kernels::cpu::gelu(float(u)), gelu, 1e-6 * (1 + std::abs(gelu))) << u;
    EXPECT_NEAR(kernels::cpu::gelu_grad(float(u)), grad, 1e-6 * (1 + std::abs(grad))) << u;
  }
}

// The erf form over both tails: absolute error at most 1e-6·(1 + |value|), and relative accuracy
// in the negative tail, where 1 + erf(u/√2) would cancel.
TEST(VectorMath, ErfGeluAndGradientMatchErfFormula) {
  for (double u = -12; u <= 12; u += 0.01) {
    const float uf = float(u);
    const double ud = double(uf);
    const double cdf = 0.5 * std::erfc(-ud / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * ud * ud) / std::sqrt(2 * M_PI);
    const double gelu = ud * cdf, grad = cdf + ud * pdf;
    EXPECT_NEAR(kernels::cpu::gelu_erf(uf), gelu, 1e-6 * (1 + std::abs(gelu))) << u;
    EXPECT_NEAR(kernels::cpu::gelu_erf_grad(uf), grad, 1e-6 * (1 + std::abs(grad))) << u;
    if (u < -1 && u > -9) {
      EXPECT_NEAR(kernels::cpu::gelu_erf(uf) / gelu, 1.0, 2e-5) << u;
    }
  }
  EXPECT_EQ(kernels::cpu::gelu_erf(0.f), 0.f);
  EXPECT_TRUE(std::isnan(kernels::cpu::gelu_erf(std::nanf(""))));
}

}  // namespace
}  // namespace megatron
