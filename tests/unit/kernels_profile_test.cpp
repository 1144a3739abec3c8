// kernels/profile.h on the CPU (what `bench --mode step --breakdown` prints): see
// kernels_profile_check.h; tests/gpu/kernels_profile_gpu_test.cpp checks the same on a GPU.
#include <gtest/gtest.h>

#include "kernels_profile_check.h"

namespace megatron {
namespace {

TEST(KernelProfile, RowsPerKernelWithCallsWorkAndTime) {
  profile_test::expect_profile_of_two_fills_and_a_gemm(Device::CPU);
}

}  // namespace
}  // namespace megatron
