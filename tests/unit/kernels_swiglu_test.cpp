// SwiGLU forward against a double-precision loop; backward against central finite
// differences of that loop (loss = Σ w ⊙ y with random w, so dy = w).
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/swiglu.h"

namespace megatron {
namespace {

using test::random_tensor;
using test::to_double;

// y [N, F] = silu(a) · u with x [N, 2F] = [a | u], in double.
std::vector<double> reference(const std::vector<double>& x, int64_t n, int64_t f) {
  std::vector<double> y(size_t(n * f));
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < f; ++j) {
      const double a = x[size_t(r * 2 * f + j)], u = x[size_t(r * 2 * f + f + j)];
      y[size_t(r * f + j)] = a / (1.0 + std::exp(-a)) * u;
    }
  return y;
}

class SwigluTest : public ::testing::TestWithParam<DType> {};

TEST_P(SwigluTest, ForwardMatchesDoubleLoop) {
  const DType dt = GetParam();
  const int64_t n = 13, f = 17;
  // |a| up to 12: both tails of the sigmoid.
  Tensor x = random_tensor({n, 2 * f}, dt, 1, -12.0, 12.0);
  Tensor y = Tensor::empty({n, f}, dt);
  kernels::swiglu_forward(x, y);
  EXPECT_CLOSE(to_double(y), reference(to_double(x), n, f), 1e-5,
               dt == DType::BF16 ? test::kBf16Eps : 1e-5);
}

TEST_P(SwigluTest, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  const int64_t n = 11, f = 13;
  Tensor x = random_tensor({n, 2 * f}, dt, 2, -4.0, 4.0);
  Tensor dy = random_tensor({n, f}, dt, 3);
  Tensor dx = Tensor::empty({n, 2 * f}, dt);
  kernels::swiglu_backward(dy, x, dx);
  const auto w = to_double(dy);
  auto loss = [&](const std::vector<double>& v) { return test::dot(w, reference(v, n, f)); };
  EXPECT_CLOSE(to_double(dx), test::numeric_grad(loss, to_double(x)), 1e-4,
               dt == DType::BF16 ? test::kBf16Eps : 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SwigluTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Swiglu, RejectsOddWidthAndWrongOutput) {
  Tensor x = Tensor::zeros({3, 5}, DType::F32), y = Tensor::zeros({3, 2}, DType::F32);
  EXPECT_THROW(kernels::swiglu_forward(x, y), Error);
  Tensor x4 = Tensor::zeros({3, 4}, DType::F32), y3 = Tensor::zeros({3, 3}, DType::F32);
  try {
    kernels::swiglu_forward(x4, y3);
    ADD_FAILURE() << "no error for y [3, 3] with x [3, 4]";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("swiglu_forward y"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace megatron
