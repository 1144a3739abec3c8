// kernels/profile.h on the CPU (what `bench --mode step --breakdown` prints): each kernel that
// MT_DISPATCH hands to a backend is a row keyed by name (GEMMs by shape and transposes) with its
// calls, FLOPs and operand bytes; only calls between turning profiling on and off count, a
// kernel called inside another is its caller's time, and reading the profile empties it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/profile.h"

namespace megatron {
namespace {

TEST(KernelProfile, RowsPerKernelWithCallsWorkAndTime) {
  Tensor a = Tensor::empty({64, 32}, DType::F32);  // [m, k]
  Tensor b = Tensor::empty({48, 32}, DType::F32);  // [n, k]
  Tensor c = Tensor::empty({64, 48}, DType::F32);  // [m, n]
  kernels::fill(c, 2.0f);                          // before: not recorded
  kernels::set_kernel_profiling(true);
  kernels::fill(a, 0.5f);
  kernels::fill(b, 0.25f);
  kernels::gemm(a, false, b, true, c);
  kernels::set_kernel_profiling(false);
  kernels::fill(c, 1.0f);  // after: not recorded
  std::map<std::string, kernels::KernelProfileRow> rows;
  for (const kernels::KernelProfileRow& r : kernels::kernel_profile()) rows[r.name] = r;
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows.at("fill").calls, 2);
  EXPECT_EQ(rows.at("fill").bytes, double((64 + 48) * 32 * 4));
  const kernels::KernelProfileRow& gemm = rows.at("gemm 64x48x32 NT");
  EXPECT_EQ(gemm.calls, 1);
  EXPECT_EQ(gemm.flops, 2.0 * 64 * 48 * 32);
  for (const auto& [name, r] : rows)
    EXPECT_TRUE(std::isfinite(r.seconds) && r.seconds >= 0) << name;
  EXPECT_TRUE(kernels::kernel_profile().empty());
}

}  // namespace
}  // namespace megatron
