// What kernels/profile.h records of two fills and a GEMM on `device` (tests/unit on the CPU,
// tests/gpu on a GPU): a row per kernel keyed by name (GEMMs by shape and transposes) with its
// calls, FLOPs and operand bytes and a finite time; only the calls between turning profiling on
// and off count; reading the profile empties it (and releases a GPU's events).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/profile.h"

namespace megatron::profile_test {

inline void expect_profile_of_two_fills_and_a_gemm(Device device) {
  Tensor a = Tensor::empty({64, 32}, DType::F32, device);  // [m, k]
  Tensor b = Tensor::empty({48, 32}, DType::F32, device);  // [n, k]
  Tensor c = Tensor::empty({64, 48}, DType::F32, device);  // [m, n]
  kernels::fill(c, 2.0f);                                  // before: not recorded
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
  EXPECT_EQ(c.to(Device::CPU).to_vector<float>()[0], 1.0f);
}

}  // namespace megatron::profile_test
