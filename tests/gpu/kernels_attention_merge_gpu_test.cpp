// attention_merge on the GPU against its CPU twin, f32/bf16/f16, with rows that one part does
// not reach (−inf log-sum-exp) and rows that neither reaches, at odd sizes.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/attention_merge.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;

// Random log-sum-exps in [−3, 3] with −inf at every `every`-th row from `first`, and at every
// 11th row (rows no part reaches, when both parts use it).
Tensor lse_with_gaps(int64_t b, int64_t heads, int64_t s, uint64_t seed, int64_t first,
                     int64_t every) {
  std::vector<float> v =
      random_tensor({b, heads, s}, DType::F32, seed, -3.0, 3.0).to_vector<float>();
  for (size_t r = 0; r < v.size(); ++r)
    if (int64_t(r) % every == first || r % 11 == 4) v[r] = -std::numeric_limits<float>::infinity();
  return Tensor::from_vector(v, {b, heads, s});
}

class AttentionMergeGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(AttentionMergeGpuTest, MatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 5;
  for (auto [s, b, heads, d] : std::vector<std::array<int64_t, 4>>{{13, 2, 3, 5}, {37, 1, 4, 64}}) {
    SCOPED_TRACE("s=" + std::to_string(s) + " b=" + std::to_string(b) +
                 " H=" + std::to_string(heads) + " d=" + std::to_string(d));
    const Tensor out = random_tensor({s, b, heads * d}, dt, seed++);
    const Tensor part = random_tensor({s, b, heads * d}, dt, seed++);
    const Tensor lse = lse_with_gaps(b, heads, s, seed++, 1, 5);
    const Tensor part_lse = lse_with_gaps(b, heads, s, seed++, 2, 5);
    Tensor out_ref = for_cpu(out), lse_ref = lse.clone();
    kernels::attention_merge(out_ref, lse_ref, for_cpu(part), part_lse);
    Tensor out_gpu = on_gpu(out), lse_gpu = on_gpu(lse);
    MT_GPU_KERNEL(dt, attention_merge, out_gpu, lse_gpu, on_gpu(part), on_gpu(part_lse));
    EXPECT_TRUE(close(out_gpu, out_ref, 1e-6, out_rtol(dt)));
    const std::vector<float> got = for_cpu(lse_gpu).to_vector<float>(),
                             want = lse_ref.to_vector<float>();
    for (size_t r = 0; r < got.size(); ++r)
      if (std::isinf(want[r]))
        EXPECT_EQ(got[r], want[r]) << "row " << r;
      else
        EXPECT_NEAR(got[r], want[r], 1e-6 * (1.0 + std::abs(want[r]))) << "row " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionMergeGpuTest,
                         ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
