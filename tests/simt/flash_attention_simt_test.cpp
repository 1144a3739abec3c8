// The fused attention's CUDA kernels (kernels/cuda/flash_attention_kernels.cuh) run on the CPU
// under the SIMT emulator, against the CPU twin, with the cases and error bounds the GPU test
// uses (tests/gpu/flash_attention_cases.h): f32 on the kernels' CUDA-core path, bf16 and f16 on
// their tensor-core path (WMMA, emulated by its API contract). Every tile size the host side may
// pick (64, 32, 16) is run, whatever shared memory a GPU would have. This is what checks the
// CUDA kernels on machines without a GPU; tests/gpu runs the same cases on one.
#include "simt_emulator.h"
// The kernels after the emulator: their CUDA built-ins are the emulator's.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "../gpu/flash_attention_cases.h"
#include "kernels/cuda/flash_attention_kernels.cuh"

namespace megatron {
namespace {

using namespace flash_test;
namespace fa = kernels::cuda::flash;

template <typename Kernel>
void launch(const fa::LaunchShape& shape, Kernel kernel) {
  simt::launch(shape.grid, dim3(fa::kBlockThreads), shape.shared_bytes, kernel);
}

// The host side of kernels/cuda/flash_attention.cu with host memory and a given tile: forward,
// then backward, dqkv first poisoned with NaN so that an element no kernel writes fails.
template <typename T>
Results run_kernels(const Operands& o, DType dt, int tile) {
  const fa::Geometry g = fa::make_geometry(o.qkv, o.params.queries_per_group);
  const fa::MaskParams m = fa::make_mask_params(
      o.params, o.params.dropout_p > 0.0f ? o.params.dropout_rows->data() : nullptr);
  const float scale = o.params.scale;
  Results r;
  r.out = Tensor::empty({g.s, g.b, g.heads * g.d}, dt);
  r.lse = Tensor::empty({g.b, g.heads, g.s}, DType::F32);
  r.dqkv =
      gpu_test::from_double(std::vector<double>(size_t(o.qkv.numel()), NAN), o.qkv.shape(), dt);
  Tensor D = Tensor::empty({g.b, g.heads, g.s}, DType::F32);
  const T* qkv = static_cast<const T*>(o.qkv.raw_data());
  const T* dout = static_cast<const T*>(o.dout.raw_data());
  T* out = static_cast<T*>(r.out.raw_data());
  T* dqkv = static_cast<T*>(r.dqkv.raw_data());
  float* lse = r.lse.data<float>();
  launch(fa::forward_launch<T>(g, tile),
         [&] { fa::forward_kernel<T>(qkv, g, m, scale, out, lse, tile); });
  launch(fa::row_dot_launch(g), [&] { fa::row_dot_kernel<T>(out, dout, g, D.data<float>()); });
  launch(fa::key_value_grad_launch<T>(g, tile), [&] {
    fa::key_value_grad_kernel<T>(qkv, dout, lse, D.data<float>(), g, m, scale, dqkv, tile);
  });
  launch(fa::query_grad_launch<T>(g, tile), [&] {
    fa::query_grad_kernel<T>(qkv, dout, lse, D.data<float>(), g, m, scale, dqkv, tile);
  });
  return r;
}

Results run_kernels(const Operands& o, DType dt, int tile) {
  switch (dt) {
    case DType::F32:
      return run_kernels<float>(o, dt, tile);
    case DType::BF16:
      return run_kernels<__nv_bfloat16>(o, dt, tile);
    default:
      return run_kernels<__half>(o, dt, tile);
  }
}

class FlashAttentionSimtTest : public ::testing::TestWithParam<DType> {};

TEST_P(FlashAttentionSimtTest, KernelsMatchTheCpuTwin) {
  const DType dt = GetParam();
  constexpr int kTiles[] = {64, 32, 16};
  uint64_t seed = 1;
  size_t index = 0;
  for (const Case& c : kCases) {
    // Each case at one tile size, in turn (every size meets masks, GQA and dropout).
    const int tile = kTiles[index++ % 3];
    SCOPED_TRACE(describe(c) + " tile " + std::to_string(tile));
    const Operands o(c, dt, seed);
    seed += 2;
    const Results want = run(widened(o.qkv), widened(o.dout), o.params, DType::F32, Device::CPU);
    expect_matches_cpu_twin(run_kernels(o, dt, tile), want, c, dt);
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FlashAttentionSimtTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
