// Bias addition on the GPU against its CPU twin, f32/bf16/f16: the in-place forward is one
// rounded add per element, so it matches the CPU bit for bit; dbias (accumulated) matches to
// rounding over one and many reduction chunks and is the same bits run to run.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/bias_add.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;

const std::vector<std::pair<int64_t, int64_t>> kSizes = {
    {1, 13}, {13, 17}, {11 * 3, 1}, {4133, 17}, {77, 2053}};

class BiasAddGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(BiasAddGpuTest, ForwardMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 1;
  for (auto [n, c] : kSizes) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    const Tensor y0 = random_tensor({n, c}, dt, seed++, -3.0, 3.0);
    const Tensor bias = random_tensor({c}, dt, seed++);
    Tensor y_ref = for_cpu(y0);
    kernels::bias_add_forward(y_ref, for_cpu(bias));
    Tensor y = on_gpu(y0);
    const Tensor bg = on_gpu(bias);
    MT_GPU_KERNEL(dt, bias_add_forward, y, bg);
    if (dt == DType::F16)
      EXPECT_TRUE(close(y, y_ref, gpu_test::out_atol(dt), out_rtol(dt)));
    else
      EXPECT_TRUE(gpu_test::bit_equal(y, y_ref));
  }
}

TEST_P(BiasAddGpuTest, BackwardAccumulatesDeterministically) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 40;
  for (auto [n, c] : kSizes) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    const Tensor dy = random_tensor({n, c}, dt, seed++);
    const Tensor dbias0 = random_tensor({c}, DType::F32, seed++);
    Tensor dbias_ref = dbias0.clone();
    kernels::bias_add_backward(for_cpu(dy), dbias_ref);
    const Tensor dyg = on_gpu(dy);
    Tensor dbias = on_gpu(dbias0), dbias2 = on_gpu(dbias0);
    MT_GPU_KERNEL(dt, bias_add_backward, dyg, dbias);
    EXPECT_TRUE(close(dbias, dbias_ref, gpu_test::sum_atol(n), 1e-5));
    MT_GPU_KERNEL(dt, bias_add_backward, dyg, dbias2);
    EXPECT_TRUE(gpu_test::bit_equal(dbias2, dbias));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BiasAddGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
