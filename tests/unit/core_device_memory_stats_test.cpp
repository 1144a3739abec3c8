// device_memory_stats on the CPU (core/device_runtime.h): the live tensor storage is counted
// by device_allocate / device_free, the resident set comes from /proc/self/status; and
// device_capacity's host memory against sysconf's.
#include <gtest/gtest.h>
#include <unistd.h>

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

TEST(DeviceCapacity, CpuIsThePhysicalMemory) {
  const DeviceCapacity c = device_capacity(Device::CPU);
  EXPECT_EQ(c.total, size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGE_SIZE)));
  EXPECT_GT(c.free, size_t(0));
  EXPECT_LE(c.free, c.total);
}

}  // namespace
}  // namespace megatron
