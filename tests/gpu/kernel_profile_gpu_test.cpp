// `bench --mode step --breakdown` on a GPU: kernels/profile.h times CUDA kernels between events
// on the compute stream, keyed and counted as on the CPU, and reading the profile releases them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "core/device_runtime.h"
#include "gpu_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/profile.h"

namespace megatron {
namespace {

TEST(KernelProfileGpu, TimesCudaKernelsWithTheirWorkAndCalls) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const Device gpu = Device::cuda(0);
  Tensor a = Tensor::empty({64, 32}, DType::F32, gpu);  // [m, k]
  Tensor b = Tensor::empty({48, 32}, DType::F32, gpu);  // [n, k]
  Tensor c = Tensor::empty({64, 48}, DType::F32, gpu);  // [m, n]
  kernels::set_kernel_profiling(true);
  kernels::fill(a, 0.5f);
  kernels::fill(b, 0.25f);
  kernels::gemm(a, false, b, true, c);
  kernels::set_kernel_profiling(false);
  kernels::fill(c, 1.0f);  // not recorded
  std::map<std::string, kernels::KernelProfileRow> rows;
  for (const kernels::KernelProfileRow& r : kernels::kernel_profile()) rows[r.name] = r;
  ASSERT_EQ(rows.size(), 2u);
  const kernels::KernelProfileRow& fill = rows.at("fill");
  EXPECT_EQ(fill.calls, 2);
  EXPECT_EQ(fill.bytes, double((64 + 48) * 32 * 4));
  const kernels::KernelProfileRow& gemm = rows.at("gemm 64x48x32 NT");
  EXPECT_EQ(gemm.calls, 1);
  EXPECT_EQ(gemm.flops, 2.0 * 64 * 48 * 32);
  for (const auto& [name, r] : rows)
    EXPECT_TRUE(std::isfinite(r.seconds) && r.seconds >= 0) << name;
  // The events were read and released: the profile is empty until profiling starts again.
  EXPECT_TRUE(kernels::kernel_profile().empty());
  EXPECT_EQ(c.to(Device::CPU).to_vector<float>()[0], 1.0f);
}

}  // namespace
}  // namespace megatron
