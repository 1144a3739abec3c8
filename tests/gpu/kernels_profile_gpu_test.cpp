// `bench --mode step --breakdown` on a GPU: kernels/profile.h times CUDA kernels between events
// on the compute stream, keyed and counted as on the CPU (../unit/kernels_profile_check.h), and
// reading the profile releases the events.
#include <gtest/gtest.h>

#include "../unit/kernels_profile_check.h"
#include "core/device_runtime.h"

namespace megatron {
namespace {

TEST(KernelProfileGpu, TimesCudaKernelsWithTheirWorkAndCalls) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  profile_test::expect_profile_of_two_fills_and_a_gemm(Device::cuda(0));
}

}  // namespace
}  // namespace megatron
