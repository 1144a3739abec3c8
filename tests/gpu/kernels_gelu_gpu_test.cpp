// Bias + GeLU (erf and tanh forms) on the GPU against its CPU twin, f32/bf16/f16: forward, backward
// (dx written, dbias accumulated) with and without a bias and with and without dbias, on odd sizes
// and on a row count that cuts the dbias reduction into many chunks; dbias is the same bits run to
// run.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/gelu.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;
using kernels::GeluForm;

const std::vector<std::pair<int64_t, int64_t>> kSizes = {
    {1, 13}, {13, 17}, {17, 11 * 3}, {4133, 17}, {129, 1031}};

class BiasGeluGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(BiasGeluGpuTest, ForwardMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 1;
  for (auto [n, c] : kSizes)
    for (bool with_bias : {true, false})
      for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
        SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c) +
                     " bias=" + std::to_string(with_bias) + " " + kernels::gelu_form_name(form));
        // |u| up to 8: both tails of the sigmoid (e^{-2z} overflowing to inf included).
        const Tensor x = random_tensor({n, c}, dt, seed++, -6.0, 6.0);
        const Tensor bias = with_bias ? random_tensor({c}, dt, seed++, -2.0, 2.0) : Tensor();
        Tensor y_ref = Tensor::empty({n, c}, gpu_test::cpu_dtype(dt));
        kernels::bias_gelu_forward(for_cpu(x), for_cpu(bias), y_ref, form);
        const Tensor xg = on_gpu(x), bg = on_gpu(bias);
        Tensor y = Tensor::empty({n, c}, dt, gpu());
        MT_GPU_KERNEL(dt, bias_gelu_forward, xg, bg, y, form);
        EXPECT_TRUE(close(y, y_ref, 1e-6, out_rtol(dt)));
      }
}

TEST_P(BiasGeluGpuTest, BackwardMatchesCpuAndIsDeterministic) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  uint64_t seed = 50;
  for (auto [n, c] : kSizes)
    for (bool with_bias : {true, false})
      for (bool with_dbias : {true, false})
        for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
          SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c) + " bias=" +
                       std::to_string(with_bias) + " dbias=" + std::to_string(with_dbias) + " " +
                       kernels::gelu_form_name(form));
          const Tensor x = random_tensor({n, c}, dt, seed++, -6.0, 6.0);
          const Tensor dy = random_tensor({n, c}, dt, seed++);
          const Tensor bias = with_bias ? random_tensor({c}, dt, seed++, -2.0, 2.0) : Tensor();
          const Tensor dbias0 = with_dbias ? random_tensor({c}, DType::F32, seed++) : Tensor();

          Tensor dx_ref = Tensor::empty({n, c}, ct);
          Tensor dbias_ref = with_dbias ? dbias0.clone() : Tensor();
          kernels::bias_gelu_backward(for_cpu(dy), for_cpu(x), for_cpu(bias), dx_ref, dbias_ref,
                                      form);

          const Tensor dyg = on_gpu(dy), xg = on_gpu(x), bg = on_gpu(bias);
          Tensor dx = Tensor::empty({n, c}, dt, gpu());
          Tensor dbias = on_gpu(dbias0);
          MT_GPU_KERNEL(dt, bias_gelu_backward, dyg, xg, bg, dx, dbias, form);
          EXPECT_TRUE(close(dx, dx_ref, 1e-6, out_rtol(dt)));
          if (!with_dbias) continue;
          // Σ over N rows of |g| <= ~1.2, in another order than the CPU's.
          EXPECT_TRUE(close(dbias, dbias_ref, gpu_test::sum_atol(n), 1e-5));
          Tensor dx2 = Tensor::empty({n, c}, dt, gpu());
          Tensor dbias2 = on_gpu(dbias0);
          MT_GPU_KERNEL(dt, bias_gelu_backward, dyg, xg, bg, dx2, dbias2, form);
          EXPECT_TRUE(gpu_test::bit_equal(dbias2, dbias));
          EXPECT_TRUE(gpu_test::bit_equal(dx2, dx));
        }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BiasGeluGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
