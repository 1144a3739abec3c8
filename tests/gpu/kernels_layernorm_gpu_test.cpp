// LayerNorm on the GPU against its CPU twin: forward (y, mean, rstd) and backward (dx written,
// accumulated and written over dy, dgamma/dbeta accumulated), f32/bf16/f16, on widths that take
// every launch shape (warp rows <= 1024, 256-thread rows, 512-thread rows) and row counts that cut
// the parameter-gradient reduction into one and many chunks. The reductions are deterministic: a
// second run gives the same bits.
#include <gtest/gtest.h>

#include <limits>
#include <utility>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/layernorm.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;

// (N, C): warp rows, 256- and 512-thread rows, and 4133 rows (128 reduction chunks).
const std::vector<std::pair<int64_t, int64_t>> kSizes = {
    {1, 13}, {11, 17}, {77, 1024}, {13, 1025}, {5, 4099}, {3, 8203}, {4133, 17}, {300, 1031}};

class LayerNormGpuTest : public ::testing::TestWithParam<DType> {};

// A backward case: x [n, c] (mean far from 0), dy, γ, and the CPU forward's saved statistics,
// which both sides use, so the backward is compared on equal inputs.
struct BackwardCase {
  Tensor x, dy, gamma, mean, rstd;
};

BackwardCase backward_case(int64_t n, int64_t c, DType dt, uint64_t& seed) {
  BackwardCase k;
  k.x = random_tensor({n, c}, dt, seed++, -2.0, 3.0);
  k.dy = random_tensor({n, c}, dt, seed++);
  k.gamma = random_tensor({c}, DType::F32, seed++, 0.5, 1.5);
  const Tensor beta = random_tensor({c}, DType::F32, seed++);
  Tensor y = Tensor::empty({n, c}, gpu_test::cpu_dtype(dt));
  k.mean = Tensor::empty({n}, DType::F32);
  k.rstd = Tensor::empty({n}, DType::F32);
  kernels::layernorm_forward(for_cpu(k.x), k.gamma, beta, 1e-5f, y, k.mean, k.rstd);
  return k;
}

TEST_P(LayerNormGpuTest, ForwardMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const float eps = 1e-5f;
  uint64_t seed = 1;
  for (auto [n, c] : kSizes) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    // Mean far from 0 (x in [-2, 3)): the two-pass variance must hold.
    const Tensor x = random_tensor({n, c}, dt, seed++, -2.0, 3.0);
    const Tensor gamma = random_tensor({c}, DType::F32, seed++, 0.5, 1.5);
    const Tensor beta = random_tensor({c}, DType::F32, seed++);

    Tensor y_ref = Tensor::empty({n, c}, gpu_test::cpu_dtype(dt));
    Tensor mean_ref = Tensor::empty({n}, DType::F32), rstd_ref = Tensor::empty({n}, DType::F32);
    kernels::layernorm_forward(for_cpu(x), gamma, beta, eps, y_ref, mean_ref, rstd_ref);

    const Tensor xg = on_gpu(x), gg = on_gpu(gamma), bg = on_gpu(beta);
    Tensor yg = Tensor::empty({n, c}, dt, gpu());
    Tensor mean = Tensor::empty({n}, DType::F32, gpu()),
           rstd = Tensor::empty({n}, DType::F32, gpu());
    MT_GPU_KERNEL(dt, layernorm_forward, xg, gg, bg, eps, yg, mean, rstd);

    EXPECT_TRUE(close(mean, mean_ref, 1e-6, 1e-5));
    EXPECT_TRUE(close(rstd, rstd_ref, 0.0, 1e-5));
    EXPECT_TRUE(close(yg, y_ref, 1e-5, out_rtol(dt)));
  }
}

TEST_P(LayerNormGpuTest, BackwardMatchesCpuAndIsDeterministic) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  uint64_t seed = 100;
  for (auto [n, c] : kSizes) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    const auto [x, dy, gamma, mean, rstd] = backward_case(n, c, dt, seed);
    // dgamma/dbeta start non-zero: the kernel accumulates (+=).
    const Tensor dgamma0 = random_tensor({c}, DType::F32, seed++);
    const Tensor dbeta0 = random_tensor({c}, DType::F32, seed++);

    for (float beta_dx : {0.f, 1.f}) {
      SCOPED_TRACE("beta_dx=" + std::to_string(beta_dx));
      // beta_dx = 1 adds to dx's values; beta_dx = 0 must not read dx at all (NaN there).
      const Tensor dx0 =
          beta_dx == 0.f
              ? gpu_test::from_double(
                    std::vector<double>(size_t(n * c), std::numeric_limits<double>::quiet_NaN()),
                    {n, c}, dt)
              : random_tensor({n, c}, dt, seed++);
      Tensor dx_ref = beta_dx == 0.f ? Tensor::empty({n, c}, ct) : for_cpu(dx0);
      Tensor dgamma_ref = dgamma0.clone(), dbeta_ref = dbeta0.clone();
      kernels::layernorm_backward(for_cpu(dy), for_cpu(x), gamma, mean, rstd, dx_ref, dgamma_ref,
                                  dbeta_ref, beta_dx);

      const Tensor dyg = on_gpu(dy), xg = on_gpu(x), gg = on_gpu(gamma);
      const Tensor meang = on_gpu(mean), rstdg = on_gpu(rstd);
      Tensor dx = on_gpu(dx0), dgamma = on_gpu(dgamma0), dbeta = on_gpu(dbeta0);
      MT_GPU_KERNEL(dt, layernorm_backward, dyg, xg, gg, meang, rstdg, dx, dgamma, dbeta, beta_dx);

      EXPECT_TRUE(close(dx, dx_ref, 5e-5, out_rtol(dt)));
      EXPECT_TRUE(close(dgamma, dgamma_ref, gpu_test::sum_atol(n), 1e-5));
      EXPECT_TRUE(close(dbeta, dbeta_ref, gpu_test::sum_atol(n), 1e-5));

      // Run to run: the same bits (fixed-order reductions, no atomics).
      Tensor dx2 = on_gpu(dx0), dgamma2 = on_gpu(dgamma0), dbeta2 = on_gpu(dbeta0);
      MT_GPU_KERNEL(dt, layernorm_backward, dyg, xg, gg, meang, rstdg, dx2, dgamma2, dbeta2,
                    beta_dx);
      EXPECT_TRUE(gpu_test::bit_equal(dx2, dx));
      EXPECT_TRUE(gpu_test::bit_equal(dgamma2, dgamma));
      EXPECT_TRUE(gpu_test::bit_equal(dbeta2, dbeta));
    }
  }
}

// dx may alias dy, as on the CPU: dgamma/dbeta must see dy before dx overwrites it.
TEST_P(LayerNormGpuTest, BackwardIntoDyMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  uint64_t seed = 200;
  // A warp-row and a block-row width.
  for (auto [n, c] : std::vector<std::pair<int64_t, int64_t>>{{77, 1024}, {13, 1025}}) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    const auto [x, dy, gamma, mean, rstd] = backward_case(n, c, dt, seed);
    Tensor dx_ref = Tensor::empty({n, c}, ct);
    Tensor dgamma_ref = Tensor::zeros({c}, DType::F32), dbeta_ref = Tensor::zeros({c}, DType::F32);
    kernels::layernorm_backward(for_cpu(dy), for_cpu(x), gamma, mean, rstd, dx_ref, dgamma_ref,
                                dbeta_ref);

    Tensor dyx = on_gpu(dy);  // dy in, dx out
    const Tensor xg = on_gpu(x), gg = on_gpu(gamma), meang = on_gpu(mean), rstdg = on_gpu(rstd);
    Tensor dgamma = Tensor::zeros({c}, DType::F32, gpu()),
           dbeta = Tensor::zeros({c}, DType::F32, gpu());
    MT_GPU_KERNEL(dt, layernorm_backward, dyx, xg, gg, meang, rstdg, dyx, dgamma, dbeta, 0.f);
    EXPECT_TRUE(close(dyx, dx_ref, 5e-5, out_rtol(dt)));
    EXPECT_TRUE(close(dgamma, dgamma_ref, gpu_test::sum_atol(n), 1e-5));
    EXPECT_TRUE(close(dbeta, dbeta_ref, gpu_test::sum_atol(n), 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LayerNormGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
