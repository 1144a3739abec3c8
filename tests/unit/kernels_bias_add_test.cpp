// kernels::bias_add_forward/backward against naive double loops, f32 and bf16.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/bias_add.h"

namespace megatron {
namespace {

void check_bias_add(DType dtype, double tolerance) {
  const int64_t n = 13, c = 17;
  Tensor y = test::random_tensor({n, c}, dtype, 1);
  Tensor bias = test::random_tensor({c}, dtype, 2);
  const std::vector<double> y0 = test::to_double(y), b = test::to_double(bias);
  kernels::bias_add_forward(y, bias);
  const std::vector<double> got = test::to_double(y);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < c; ++j)
      EXPECT_NEAR(got[r * c + j], y0[r * c + j] + b[j], tolerance * (1 + std::abs(got[r * c + j])));

  Tensor dy = test::random_tensor({n, c}, dtype, 3);
  Tensor dbias = test::random_tensor({c}, DType::F32, 4);  // accumulated into
  const std::vector<double> g = test::to_double(dy), db0 = test::to_double(dbias);
  kernels::bias_add_backward(dy, dbias);
  const std::vector<double> db = test::to_double(dbias);
  for (int64_t j = 0; j < c; ++j) {
    double expect = db0[j];
    for (int64_t r = 0; r < n; ++r) expect += g[r * c + j];
    EXPECT_NEAR(db[j], expect, 1e-5 * (1 + std::abs(expect)));
  }
}

TEST(KernelsBiasAdd, F32MatchesNaiveLoop) {
  check_bias_add(DType::F32, 1e-6);
}
TEST(KernelsBiasAdd, Bf16MatchesNaiveLoop) {
  check_bias_add(DType::BF16, 1.0 / 128);
}

TEST(KernelsBiasAdd, RejectsMismatchedBias) {
  Tensor y = Tensor::zeros({4, 5}, DType::F32);
  Tensor bias = Tensor::zeros({6}, DType::F32);
  EXPECT_THROW(kernels::bias_add_forward(y, bias), Error);
}

}  // namespace
}  // namespace megatron
