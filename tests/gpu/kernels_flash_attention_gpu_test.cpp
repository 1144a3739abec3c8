// The fused attention on the GPU (kernels/cuda/flash_attention.cu) against its CPU twin, which
// kernels_flash_attention_test checks against a double-precision attention. Sizes cross the
// 64-row tiles, head dimensions are not multiples of 16 (zero padding) and reach 256 (smaller
// tiles for lack of shared memory), with GQA, causal and padding masks (a batch entry whose
// every key is padding gives zeros and lse −inf) and attention dropout, whose mask the GPU must
// draw exactly as the CPU does (cases and error bounds: flash_attention_cases.h).
#include <gtest/gtest.h>

#include "core/device_runtime.h"
#include "flash_attention_cases.h"

namespace megatron {
namespace {

using namespace flash_test;
using gpu_test::gpu;
using gpu_test::on_gpu;

Results on_gpu_run(const Operands& o, DType dt) {
  kernels::FlashAttentionParams p = o.params;
  p.pad_mask = on_gpu(o.params.pad_mask);
  return run(on_gpu(o.qkv), on_gpu(o.dout), p, dt, gpu());
}

class FlashAttentionGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(FlashAttentionGpuTest, MatchesTheCpuTwin) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    const Operands o(c, dt, seed);
    seed += 2;
    // The CPU twin in f32 on the same values: for f32 the twin itself; for 16-bit operands the
    // f32 result the GPU's only roundings are measured against.
    const Results want = run(widened(o.qkv), widened(o.dout), o.params, DType::F32, Device::CPU);
    const Results got = on_gpu_run(o, dt);
    expect_matches_cpu_twin(got, want, c, dt);
  }
}

TEST_P(FlashAttentionGpuTest, IsDeterministic) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const Case c{200, 2, 2, 2, 64, true, true, 0.1f};
  const Operands o(c, dt, 77);
  const Results a = on_gpu_run(o, dt), b = on_gpu_run(o, dt);
  EXPECT_TRUE(gpu_test::bit_equal(a.out, b.out));
  EXPECT_TRUE(gpu_test::bit_equal(a.lse, b.lse));
  EXPECT_TRUE(gpu_test::bit_equal(a.dqkv, b.dqkv));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FlashAttentionGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

TEST(FlashAttentionGpu, RefusesAHeadDimensionBeyondSharedMemory) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  // f32, d 2048: even 16-row tiles of Q, K, V and dout need 512 KiB of shared memory.
  const Case c{16, 1, 1, 1, 2048, true, false, 0.0f};
  const Operands o(c, DType::F32, 5);
  EXPECT_THROW(on_gpu_run(o, DType::F32), Error);
}

}  // namespace
}  // namespace megatron
