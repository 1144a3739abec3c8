// RMSNorm, rotary embedding and SwiGLU on the GPU against their CPU twins, f32/bf16/f16:
// RMSNorm forward and backward (dx written, accumulated and written over dy, dgamma accumulated,
// the same bits run to run) on widths that take every row launch shape; rotary in place on a
// strided Q view of a fused QKV buffer and out of place, forward and inverse, with a partial rotary
// dim, plain, with Llama 3's scaling and with YaRN's (kernels/yarn_rope.h); SwiGLU forward and
// backward.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/rmsnorm.h"
#include "kernels/rotary.h"
#include "kernels/swiglu.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;

const std::vector<std::pair<int64_t, int64_t>> kSizes = {
    {1, 13}, {11, 17}, {77, 1024}, {13, 1025}, {5, 4099}, {3, 8203}, {4133, 17}};

class LlamaKernelsGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(LlamaKernelsGpuTest, RmsNormMatchesCpuAndIsDeterministic) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  const float eps = 1e-6f;
  uint64_t seed = 1;
  for (auto [n, c] : kSizes) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    const Tensor x = random_tensor({n, c}, dt, seed++, -2.0, 3.0);
    const Tensor dy = random_tensor({n, c}, dt, seed++);
    const Tensor gamma = random_tensor({c}, DType::F32, seed++, 0.5, 1.5);
    Tensor y_ref = Tensor::empty({n, c}, ct), rstd_ref = Tensor::empty({n}, DType::F32);
    kernels::rmsnorm_forward(for_cpu(x), gamma, eps, y_ref, rstd_ref);
    const Tensor xg = on_gpu(x), gg = on_gpu(gamma), dyg = on_gpu(dy);
    Tensor y = Tensor::empty({n, c}, dt, gpu()), rstd = Tensor::empty({n}, DType::F32, gpu());
    MT_GPU_KERNEL(dt, rmsnorm_forward, xg, gg, eps, y, rstd);
    EXPECT_TRUE(close(rstd, rstd_ref, 0.0, 1e-5));
    EXPECT_TRUE(close(y, y_ref, 1e-5, out_rtol(dt)));

    // Both sides use the CPU's saved statistics.
    const Tensor dgamma0 = random_tensor({c}, DType::F32, seed++);
    const Tensor rstd_g = on_gpu(rstd_ref);
    for (float beta_dx : {0.f, 1.f}) {
      const Tensor dx0 = random_tensor({n, c}, dt, seed++);
      Tensor dx_ref = for_cpu(dx0).clone(), dgamma_ref = dgamma0.clone();
      kernels::rmsnorm_backward(for_cpu(dy), for_cpu(x), gamma, rstd_ref, dx_ref, dgamma_ref,
                                beta_dx);
      Tensor dx = on_gpu(dx0), dgamma = on_gpu(dgamma0);
      MT_GPU_KERNEL(dt, rmsnorm_backward, dyg, xg, gg, rstd_g, dx, dgamma, beta_dx);
      EXPECT_TRUE(close(dx, dx_ref, 1e-5, 2 * out_rtol(dt)));
      EXPECT_TRUE(close(dgamma, dgamma_ref, gpu_test::sum_atol(n) * 4, 1e-5));
      Tensor dx2 = on_gpu(dx0), dgamma2 = on_gpu(dgamma0);
      MT_GPU_KERNEL(dt, rmsnorm_backward, dyg, xg, gg, rstd_g, dx2, dgamma2, beta_dx);
      EXPECT_TRUE(gpu_test::bit_equal(dx2, dx));
      EXPECT_TRUE(gpu_test::bit_equal(dgamma2, dgamma));
    }
  }
}

// dx may alias dy, as on the CPU: dgamma must see dy before dx overwrites it.
TEST_P(LlamaKernelsGpuTest, RmsNormBackwardIntoDyMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  uint64_t seed = 50;
  // A warp-row and a block-row width.
  for (auto [n, c] : std::vector<std::pair<int64_t, int64_t>>{{77, 1024}, {13, 1025}}) {
    SCOPED_TRACE("N=" + std::to_string(n) + " C=" + std::to_string(c));
    const Tensor x = random_tensor({n, c}, dt, seed++, -2.0, 3.0);
    const Tensor dy = random_tensor({n, c}, dt, seed++);
    const Tensor gamma = random_tensor({c}, DType::F32, seed++, 0.5, 1.5);
    Tensor y_ref = Tensor::empty({n, c}, ct), rstd = Tensor::empty({n}, DType::F32);
    kernels::rmsnorm_forward(for_cpu(x), gamma, 1e-6f, y_ref, rstd);
    Tensor dx_ref = Tensor::empty({n, c}, ct), dgamma_ref = Tensor::zeros({c}, DType::F32);
    kernels::rmsnorm_backward(for_cpu(dy), for_cpu(x), gamma, rstd, dx_ref, dgamma_ref);

    Tensor dyx = on_gpu(dy);  // dy in, dx out
    const Tensor xg = on_gpu(x), gg = on_gpu(gamma), rstdg = on_gpu(rstd);
    Tensor dgamma = Tensor::zeros({c}, DType::F32, gpu());
    MT_GPU_KERNEL(dt, rmsnorm_backward, dyx, xg, gg, rstdg, dyx, dgamma, 0.f);
    EXPECT_TRUE(close(dyx, dx_ref, 1e-5, 2 * out_rtol(dt)));
    EXPECT_TRUE(close(dgamma, dgamma_ref, gpu_test::sum_atol(n) * 4, 1e-5));
  }
}

TEST_P(LlamaKernelsGpuTest, RotaryMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const int64_t s = 33, b = 3, heads = 4, d = 64;
  for (int64_t rotary_dim : {int64_t(64), int64_t(32)})
    for (bool inverse : {false, true})
      for (const char* scaling : {"none", "llama3", "yarn"}) {
        const bool llama3 = scaling == std::string("llama3"), yarn = scaling == std::string("yarn");
        // Interleaved pairs (--rotary-interleaved) with the Llama 3 cases: every flag is seen.
        const bool interleaved = llama3;
        SCOPED_TRACE("r=" + std::to_string(rotary_dim) + " inverse=" + std::to_string(inverse) +
                     " scaling=" + scaling + " interleaved=" + std::to_string(interleaved));
        kernels::RotaryParams p{.rotary_dim = rotary_dim,
                                .base = 10000.0f,
                                .seq_interpolation_factor = yarn ? 1.0f : 2.0f,
                                .llama3 = {}};
        // Llama 3's scaling with a short original context, so that s = 33 positions past 100
        // reach all three of its regimes.
        if (llama3) p.llama3 = {8.0f, 1.0f, 4.0f, 256.0f};
        // YaRN's with a short original context too: its ramp spans pairs 0 to 13 (r = 64) or
        // 0 to 6.4 unrounded (r = 32), and a concentration factor other than 1.
        if (yarn)
          p.yarn = kernels::YarnRopeScaling{.factor = 40.0f,
                                            .original_max_position_embeddings = 256.0f,
                                            .mscale = 1.2f,
                                            .mscale_all_dim = 0.5f,
                                            .round_to_int = rotary_dim == 64};
        p.interleaved = interleaved;
        const Tensor qkv = random_tensor({s, b, heads, 3, d}, dt, 7, -2.0, 2.0);
        // Q of [s, b, heads, 3, d], rotated in place.
        auto q_of = [&](const Tensor& t) {
          return Tensor(t.storage(), t.offset(), {s, b, heads, d},
                        {b * heads * 3 * d, heads * 3 * d, 3 * d, 1}, t.dtype());
        };
        Tensor ref = for_cpu(qkv).clone();
        Tensor q_ref = q_of(ref);
        kernels::rotary_embedding(q_ref, 100, p, inverse, q_ref);
        Tensor g = on_gpu(qkv);
        Tensor q = q_of(g);
        MT_GPU_KERNEL(dt, rotary_embedding, q, 100, p, inverse, q);
        // f32 angles on both sides; cosf/sinf/powf differ from the host's by a few ulp.
        EXPECT_TRUE(close(g, ref, 1e-5, out_rtol(dt)));
        // Out of place: a contiguous output.
        Tensor out = Tensor::empty({s, b, heads, d}, dt, gpu());
        const Tensor q_in = q_of(on_gpu(qkv));
        MT_GPU_KERNEL(dt, rotary_embedding, q_in, 100, p, inverse, out);
        EXPECT_TRUE(close(out, q_ref.clone(), 1e-5, out_rtol(dt)));
      }
}

TEST_P(LlamaKernelsGpuTest, SwigluMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  uint64_t seed = 300;
  for (auto [n, f] : kSizes) {
    SCOPED_TRACE("N=" + std::to_string(n) + " F=" + std::to_string(f));
    const Tensor x = random_tensor({n, 2 * f}, dt, seed++, -8.0, 8.0);
    const Tensor dy = random_tensor({n, f}, dt, seed++);
    Tensor y_ref = Tensor::empty({n, f}, ct), dx_ref = Tensor::empty({n, 2 * f}, ct);
    kernels::swiglu_forward(for_cpu(x), y_ref);
    kernels::swiglu_backward(for_cpu(dy), for_cpu(x), dx_ref);
    const Tensor xg = on_gpu(x), dyg = on_gpu(dy);
    Tensor y = Tensor::empty({n, f}, dt, gpu()), dx = Tensor::empty({n, 2 * f}, dt, gpu());
    MT_GPU_KERNEL(dt, swiglu_forward, xg, y);
    MT_GPU_KERNEL(dt, swiglu_backward, dyg, xg, dx);
    EXPECT_TRUE(close(y, y_ref, 1e-6, out_rtol(dt)));
    EXPECT_TRUE(close(dx, dx_ref, 1e-6, out_rtol(dt)));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LlamaKernelsGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
