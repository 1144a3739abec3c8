// device_memory_stats on the CPU (core/device_runtime.h): the live tensor storage is counted
// by device_allocate / device_free, the resident set comes from /proc/self/status.
#include <gtest/gtest.h>

#include "core/device_runtime.h"
#include "core/tensor.h"

namespace megatron {
namespace {

TEST(DeviceMemoryStats, CpuCountsLiveTensorStorageAndItsPeak) {
  const DeviceMemoryStats before = device_memory_stats(Device::CPU);
  constexpr size_t kBytes = size_t(16) << 20;  // 4 Mi f32
  DeviceMemoryStats during;
  {
    Tensor t = Tensor::zeros({int64_t(kBytes / 4)}, DType::F32);
    during = device_memory_stats(Device::CPU);
    EXPECT_GE(during.allocated, before.allocated + kBytes);
    EXPECT_LT(during.allocated, before.allocated + kBytes + (size_t(1) << 20));
    EXPECT_EQ(during.allocations, before.allocations + 1);
    EXPECT_GE(during.max_allocated, during.allocated);
    // zeros() touched every page, so the resident set holds them.
    EXPECT_GE(during.reserved, kBytes);
    EXPECT_GE(during.max_reserved, during.reserved);
  }
  const DeviceMemoryStats after = device_memory_stats(Device::CPU);
  EXPECT_EQ(after.allocated, before.allocated);
  EXPECT_EQ(after.allocations, before.allocations);
  EXPECT_GE(after.max_allocated, during.allocated);  // the peak stays
}

}  // namespace
}  // namespace megatron
