// Bias + tanh on the GPU against its CPU twin, f32/bf16/f16: forward with and without a bias and
// in place (y aliasing x); backward in place (dx aliasing dy) with dbias accumulated over the
// STORED dx, as the CPU sums it, over one and many reduction chunks, the same bits run to run.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/bias_tanh.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;
using gpu_test::to_double;

const std::vector<std::pair<int64_t, int64_t>> kSizes = {{1, 13}, {13, 17}, {4133, 17}, {7, 1031}};

class BiasTanhGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(BiasTanhGpuTest, ForwardMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 1;
  for (auto [n, c] : kSizes)
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c) +
                   " bias=" + std::to_string(with_bias));
      const Tensor x = random_tensor({n, c}, dt, seed++, -4.0, 4.0);
      const Tensor bias = with_bias ? random_tensor({c}, dt, seed++) : Tensor();
      Tensor y_ref = Tensor::empty({n, c}, gpu_test::cpu_dtype(dt));
      kernels::bias_tanh_forward(for_cpu(x), for_cpu(bias), y_ref);
      const Tensor xg = on_gpu(x), bg = on_gpu(bias);
      Tensor y = Tensor::empty({n, c}, dt, gpu());
      MT_GPU_KERNEL(dt, bias_tanh_forward, xg, bg, y);
      EXPECT_TRUE(close(y, y_ref, 1e-6, out_rtol(dt)));
      Tensor inplace = on_gpu(x);  // y aliases x
      MT_GPU_KERNEL(dt, bias_tanh_forward, inplace, bg, inplace);
      EXPECT_TRUE(gpu_test::bit_equal(inplace, y));
    }
}

TEST_P(BiasTanhGpuTest, BackwardInPlaceMatchesCpuAndIsDeterministic) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 70;
  for (auto [n, c] : kSizes) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    const Tensor y = random_tensor({n, c}, dt, seed++, -0.999, 0.999);  // a tanh output
    const Tensor dy = random_tensor({n, c}, dt, seed++);
    const Tensor dbias0 = random_tensor({c}, DType::F32, seed++);
    Tensor dx_ref = Tensor::empty({n, c}, gpu_test::cpu_dtype(dt));
    Tensor dbias_ref = dbias0.clone();
    kernels::bias_tanh_backward(for_cpu(dy), for_cpu(y), dx_ref, dbias_ref);
    // The GPU sums its dx rounded to f16; the f32 CPU reference sums unrounded values, so the f16
    // reference sum is rebuilt from the CPU's dx rounded to f16.
    if (dt == DType::F16) {
      const std::vector<double> dxr =
          to_double(gpu_test::from_double(to_double(dx_ref), {n, c}, DType::F16));
      std::vector<double> db = to_double(dbias0);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t j = 0; j < c; ++j) db[size_t(j)] += dxr[size_t(r * c + j)];
      dbias_ref = gpu_test::from_double(db, {c}, DType::F32);
    }

    const Tensor yg = on_gpu(y);
    Tensor dx = on_gpu(dy);  // dx aliases dy
    Tensor dbias = on_gpu(dbias0);
    MT_GPU_KERNEL(dt, bias_tanh_backward, dx, yg, dx, dbias);
    EXPECT_TRUE(close(dx, dx_ref, 1e-6, out_rtol(dt)));
    // A stored 16-bit dx may round the other way than the CPU's: one ulp (<= 2^-8) per rare flip.
    const double flips = dt == DType::F32 ? 0.0 : 1.0 / 64;
    EXPECT_TRUE(close(dbias, dbias_ref, gpu_test::sum_atol(n) + flips, 1e-5));

    Tensor dx2 = on_gpu(dy), dbias2 = on_gpu(dbias0);
    MT_GPU_KERNEL(dt, bias_tanh_backward, dx2, yg, dx2, dbias2);
    EXPECT_TRUE(gpu_test::bit_equal(dbias2, dbias));

    // Without dbias: the same dx.
    Tensor dx3 = on_gpu(dy), none;
    MT_GPU_KERNEL(dt, bias_tanh_backward, dx3, yg, dx3, none);
    EXPECT_TRUE(gpu_test::bit_equal(dx3, dx));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, BiasTanhGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
