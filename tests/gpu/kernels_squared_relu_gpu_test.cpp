// Bias + squared ReLU on the GPU against its CPU twin, f32/bf16/f16: forward, backward (dx
// written, dbias accumulated) with and without a bias and a dbias, on odd sizes and on a row
// count that cuts the dbias reduction into many chunks; dbias is the same bits run to run.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/squared_relu.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;

const std::vector<std::pair<int64_t, int64_t>> kSizes = {{1, 13}, {17, 33}, {4133, 17}};

class BiasSquaredReluGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(BiasSquaredReluGpuTest, ForwardAndBackwardMatchCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  uint64_t seed = 70;
  for (auto [n, c] : kSizes)
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c) +
                   " bias=" + std::to_string(with_bias));
      const Tensor x = random_tensor({n, c}, dt, seed++, -1.0, 1.0);
      const Tensor dy = random_tensor({n, c}, dt, seed++);
      const Tensor bias = with_bias ? random_tensor({c}, dt, seed++, -0.25, 0.25) : Tensor();
      const Tensor dbias0 = random_tensor({c}, DType::F32, seed++);
      Tensor y_ref = Tensor::empty({n, c}, ct), dx_ref = Tensor::empty({n, c}, ct);
      Tensor dbias_ref = dbias0.clone();
      kernels::bias_squared_relu_forward(for_cpu(x), for_cpu(bias), y_ref);
      kernels::bias_squared_relu_backward(for_cpu(dy), for_cpu(x), for_cpu(bias), dx_ref,
                                          dbias_ref);
      const Tensor xg = on_gpu(x), bg = on_gpu(bias), dyg = on_gpu(dy);
      Tensor y = Tensor::empty({n, c}, dt, gpu()), dx = Tensor::empty({n, c}, dt, gpu());
      Tensor dbias = on_gpu(dbias0), no_dbias;
      MT_GPU_KERNEL(dt, bias_squared_relu_forward, xg, bg, y);
      EXPECT_TRUE(close(y, y_ref, 1e-6, out_rtol(dt)));
      MT_GPU_KERNEL(dt, bias_squared_relu_backward, dyg, xg, bg, dx, dbias);
      EXPECT_TRUE(close(dx, dx_ref, 1e-6, out_rtol(dt)));
      EXPECT_TRUE(close(dbias, dbias_ref, gpu_test::sum_atol(n), 1e-5));
      Tensor dx2 = Tensor::empty({n, c}, dt, gpu()), dbias2 = on_gpu(dbias0);
      MT_GPU_KERNEL(dt, bias_squared_relu_backward, dyg, xg, bg, dx2, dbias2);
      EXPECT_TRUE(gpu_test::bit_equal(dbias2, dbias));
      Tensor dx3 = Tensor::empty({n, c}, dt, gpu());
      MT_GPU_KERNEL(dt, bias_squared_relu_backward, dyg, xg, bg, dx3, no_dbias);
      EXPECT_TRUE(gpu_test::bit_equal(dx3, dx));
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BiasSquaredReluGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
