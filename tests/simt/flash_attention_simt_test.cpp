// The fused attention's CUDA kernels (kernels/cuda/flash_attention_kernels.cuh) run on the CPU
// under the SIMT emulator, against the CPU twin, with the cases and error bounds the GPU test
// uses (tests/gpu/flash_attention_cases.h): the shared-memory kernels with f32 on their CUDA-core
// path, bf16 and f16 on their tensor-core path (WMMA, emulated by its API contract), at every tile
// size the host side may pick (64, 32, 16), whatever shared memory a GPU would have; and the
// FlashAttention-2-style warp-tile kernels (mma.sync and ldmatrix, emulated in the ISA's fragment
// layouts) for bf16 and f16 at every padded head dimension. This is what checks the CUDA kernels
// on machines without a GPU; tests/gpu runs the same cases on one (through the host side, which
// picks the warp-tile kernels wherever they apply).
#include "simt_emulator.h"
// The kernels after the emulator: their CUDA built-ins are the emulator's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../gpu/flash_attention_cases.h"
#include "kernels/cuda/flash_attention_kernels.cuh"
#include "kernels/cuda/flash_attention_warp_tiles.cuh"

namespace megatron {
namespace {

using namespace flash_test;
namespace fa = kernels::cuda::flash;

template <typename Kernel>
void launch(const fa::LaunchShape& shape, Kernel kernel) {
  simt::launch(shape.grid, dim3(fa::kBlockThreads), shape.shared_bytes, kernel);
}

// What the host side of kernels/cuda/flash_attention.cu hands the kernels, with host memory:
// the case's geometry, masks and scale, its results (dqkv first poisoned with NaN so that an
// element no kernel writes fails) and the backward's row term D, which row_dot() computes.
template <typename T>
struct KernelOperands {
  KernelOperands(const Operands& o, DType dt)
      : g(fa::make_geometry(o.qkv, o.params.queries_per_group)),
        m(fa::make_mask_params(
            o.params, o.params.dropout_p > 0.0f ? o.params.dropout_rows->data() : nullptr)),
        scale(o.params.scale) {
    r.out = Tensor::empty({g.s, g.b, g.heads * g.d}, dt);
    r.lse = Tensor::empty({g.b, g.heads, g.s}, DType::F32);
    r.dqkv =
        gpu_test::from_double(std::vector<double>(size_t(o.qkv.numel()), NAN), o.qkv.shape(), dt);
    D = Tensor::empty({g.b, g.heads, g.s}, DType::F32);
    qkv = static_cast<const T*>(o.qkv.raw_data());
    dout = static_cast<const T*>(o.dout.raw_data());
    out = static_cast<T*>(r.out.raw_data());
    dqkv = static_cast<T*>(r.dqkv.raw_data());
    lse = r.lse.data<float>();
    d = D.data<float>();
  }
  void row_dot() {
    launch(fa::row_dot_launch(g), [&] { fa::row_dot_kernel<T>(out, dout, g, d); });
  }

  fa::Geometry g;
  fa::MaskParams m;
  float scale;
  Results r;
  Tensor D;
  const T *qkv, *dout;
  T *out, *dqkv;
  float *lse, *d;
};

// The shared-memory kernels at a given tile: forward, then backward.
template <typename T>
Results run_kernels(const Operands& o, DType dt, int tile) {
  KernelOperands<T> k(o, dt);
  launch(fa::forward_launch<T>(k.g, tile),
         [&] { fa::forward_kernel<T>(k.qkv, k.g, k.m, k.scale, k.out, k.lse, tile); });
  k.row_dot();
  launch(fa::key_value_grad_launch<T>(k.g, tile), [&] {
    fa::key_value_grad_kernel<T>(k.qkv, k.dout, k.lse, k.d, k.g, k.m, k.scale, k.dqkv, tile);
  });
  launch(fa::query_grad_launch<T>(k.g, tile), [&] {
    fa::query_grad_kernel<T>(k.qkv, k.dout, k.lse, k.d, k.g, k.m, k.scale, k.dqkv, tile);
  });
  return k.r;
}

// The warp-tile kernels at head dimension kD (16-bit operands, d <= kD).
template <typename T, int kD>
Results run_warp_tile_kernels(const Operands& o, DType dt) {
  namespace wt = fa::warp_tiles;
  KernelOperands<T> k(o, dt);
  launch(wt::forward_launch<T, kD>(k.g),
         [&] { wt::forward_kernel<T, kD>(k.qkv, k.g, k.m, k.scale, k.out, k.lse); });
  k.row_dot();
  launch(wt::key_value_grad_launch<T, kD>(k.g), [&] {
    wt::key_value_grad_kernel<T, kD>(k.qkv, k.dout, k.lse, k.d, k.g, k.m, k.scale, k.dqkv);
  });
  launch(wt::query_grad_launch<T, kD>(k.g), [&] {
    wt::query_grad_kernel<T, kD>(k.qkv, k.dout, k.lse, k.d, k.g, k.m, k.scale, k.dqkv);
  });
  return k.r;
}

template <typename T>
Results run_warp_tile_kernels(const Operands& o, DType dt, int kd) {
  switch (kd) {
    case 32:
      return run_warp_tile_kernels<T, 32>(o, dt);
    case 64:
      return run_warp_tile_kernels<T, 64>(o, dt);
    case 96:
      return run_warp_tile_kernels<T, 96>(o, dt);
    default:
      return run_warp_tile_kernels<T, 128>(o, dt);
  }
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

// The warp-tile kernels take 16-bit operands only.
class FlashAttentionWarpTileSimtTest : public ::testing::TestWithParam<DType> {};

TEST_P(FlashAttentionWarpTileSimtTest, KernelsMatchTheCpuTwin) {
  const DType dt = GetParam();
  uint64_t seed = 101;
  std::vector<int> head_dims_run;
  for (const Case& c : kCases) {
    const int kd = fa::warp_tiles::padded_head_dim(c.d);
    if (kd == 0) continue;  // d > 128: the shared-memory kernels'
    head_dims_run.push_back(kd);
    SCOPED_TRACE(describe(c) + " kD " + std::to_string(kd));
    const Operands o(c, dt, seed);
    seed += 2;
    const Results want = run(widened(o.qkv), widened(o.dout), o.params, DType::F32, Device::CPU);
    const Results got = dt == DType::BF16 ? run_warp_tile_kernels<__nv_bfloat16>(o, dt, kd)
                                          : run_warp_tile_kernels<__half>(o, dt, kd);
    expect_matches_cpu_twin(got, want, c, dt);
  }
  for (int kd : fa::warp_tiles::kHeadDims)
    EXPECT_NE(std::count(head_dims_run.begin(), head_dims_run.end(), kd), 0)
        << "no case runs the kernels at kD " << kd;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, FlashAttentionSimtTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);
INSTANTIATE_TEST_SUITE_P(Dtypes, FlashAttentionWarpTileSimtTest,
                         ::testing::Values(DType::BF16, DType::F16), gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
