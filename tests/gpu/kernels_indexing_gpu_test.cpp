// fill_positions / first_out_of_range on the GPU against the CPU twin and the formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/indexing.h"

namespace megatron {
namespace {

using gpu_test::on_cpu;
using gpu_test::on_gpu;
using gpu_test::same_bits;

TEST(GpuFillPositions, MatchesCpuAndFormula) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (int64_t batch : {int64_t(1), int64_t(3), int64_t(8)})
    for (int64_t start : {int64_t(0), int64_t(7), int64_t(1023)}) {
      SCOPED_TRACE(::testing::Message() << "batch " << batch << " start " << start);
      const int64_t s = 131;
      Tensor cpu = Tensor::empty({s * batch}, DType::I32);
      kernels::fill_positions(cpu, batch, start);
      Tensor gpu = Tensor::empty({s * batch}, DType::I32, gpu_test::gpu());
      kernels::fill_positions(gpu, batch, start);
      EXPECT_TRUE(same_bits(gpu, cpu));
      const std::vector<int32_t> ids = on_cpu(gpu).to_vector<int32_t>();
      for (int64_t i = 0; i < s * batch; ++i)
        ASSERT_EQ(ids[size_t(i)], int32_t(start + i / batch)) << "at " << i;
    }
}

// Ids inside [lo, hi) everywhere except at chosen positions: the smallest bad position wins,
// whichever block of the GPU sees it, and the answer equals the CPU's.
TEST(GpuFirstOutOfRange, SmallestBadIndex) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int32_t lo = 50, hi = 1000;
  for (int64_t n : {int64_t(1), int64_t(257), int64_t(100003), (int64_t(1) << 21) + 7}) {
    const Tensor good = gpu_test::random_ids(n, lo, hi - 1, uint64_t(n));
    EXPECT_EQ(kernels::first_out_of_range(on_gpu(good), lo, hi), -1) << "n " << n;
    EXPECT_EQ(kernels::first_out_of_range(good, lo, hi), -1);
    const std::vector<std::vector<int64_t>> bad_sets = {
        {0}, {n - 1}, {n / 2, n - 1}, {n / 3, n / 5, n - 1}, {n / 7 + 1, n / 7}};
    for (const auto& bad : bad_sets) {
      std::vector<int32_t> v = good.to_vector<int32_t>();
      int64_t smallest = n;
      for (size_t j = 0; j < bad.size(); ++j) {
        const int64_t at = std::min(bad[j], n - 1);
        v[size_t(at)] = j % 2 == 0 ? hi : lo - 1 - int32_t(j);  // above and below the range
        smallest = std::min(smallest, at);
      }
      const Tensor ids = Tensor::from_vector(v, {n});
      EXPECT_EQ(kernels::first_out_of_range(on_gpu(ids), lo, hi), smallest) << "n " << n;
      EXPECT_EQ(kernels::first_out_of_range(ids, lo, hi), smallest) << "n " << n;
    }
  }
  // A negative id is out of [0, V).
  const Tensor ids = Tensor::from_vector<int32_t>({0, 4, -1, 2}, {4});
  EXPECT_EQ(kernels::first_out_of_range(on_gpu(ids), 0, 5), 2);
  // Bounds wider than i32.
  EXPECT_EQ(kernels::first_out_of_range(on_gpu(ids), -(int64_t(1) << 40), int64_t(1) << 40), -1);
}

}  // namespace
}  // namespace megatron
