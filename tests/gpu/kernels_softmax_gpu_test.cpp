// Scaled masked softmax on the GPU against its CPU twin, f32/bf16/f16: rows of every launch
// shape (warp rows <= 1024 keys, 256-thread rows, 512-thread rows past 8192 keys), causal with
// Sq == Sk and Sq < Sk (decoding), padding masks including a fully padded sample (all-zero rows,
// never NaN), huge scores (no overflow); backward, also in place (dscores aliasing dprobs).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/softmax.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;
using gpu_test::to_double;

struct Case {
  int64_t b, h, sq, sk;
};

// Sq < Sk only matters for causal; the widths cross every launch-shape boundary.
const std::vector<Case> kCases = {{2, 3, 13, 13},  {1, 2, 3, 10},     {2, 1, 17, 1024},
                                  {1, 2, 5, 1025}, {1, 1, 3, 4096},   {1, 1, 2, 8193},
                                  {1, 1, 7, 4099}, {3, 5, 11, 11 * 3}};

// pad [b, sk]: a few padded keys in sample 0, every key padded in the last sample (b > 1).
Tensor make_pad(int64_t b, int64_t sk) {
  std::vector<uint8_t> pad(size_t(b * sk), 0);
  for (int64_t j = 0; j < sk; j += 5) pad[size_t(j)] = 1;
  if (b > 1)
    for (int64_t j = 0; j < sk; ++j) pad[size_t((b - 1) * sk + j)] = 1;
  return Tensor::from_vector(pad, {b, sk});
}

class SoftmaxGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(SoftmaxGpuTest, ForwardMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 1;
  for (const Case& k : kCases)
    for (bool causal : {false, true})
      for (bool padded : {false, true})
        for (double range : {3.0, 1000.0}) {  // ×1000: exp must not overflow
          SCOPED_TRACE("shape [" + std::to_string(k.b) + ", " + std::to_string(k.h) + ", " +
                       std::to_string(k.sq) + ", " + std::to_string(k.sk) +
                       "] causal=" + std::to_string(causal) + " padded=" + std::to_string(padded) +
                       " range=" + std::to_string(range));
          const Shape shape{k.b, k.h, k.sq, k.sk};
          const Tensor scores = random_tensor(shape, dt, seed++, -range, range);
          const Tensor pad = padded ? make_pad(k.b, k.sk) : Tensor();
          Tensor ref = Tensor::empty(shape, gpu_test::cpu_dtype(dt));
          kernels::scaled_masked_softmax_forward(for_cpu(scores), 0.125f, causal, pad, ref);
          const Tensor sg = on_gpu(scores), pg = on_gpu(pad);
          Tensor probs = Tensor::empty(shape, dt, gpu());
          MT_GPU_KERNEL(dt, scaled_masked_softmax_forward, sg, 0.125f, causal, pg, probs);
          EXPECT_TRUE(close(probs, ref, 1e-6, out_rtol(dt)));
          if (padded && k.b > 1) {  // the fully padded sample: exact zeros
            const std::vector<double> p = to_double(probs);
            const size_t per_sample = size_t(k.h * k.sq * k.sk);
            for (size_t i = per_sample * size_t(k.b - 1); i < p.size(); ++i)
              ASSERT_EQ(p[i], 0.0) << "flat index " << i;
          }
        }
}

TEST_P(SoftmaxGpuTest, BackwardMatchesCpuAlsoInPlace) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  const DType ct = gpu_test::cpu_dtype(dt);
  const float scale = 0.3f;
  uint64_t seed = 500;
  for (const Case& k : kCases) {
    SCOPED_TRACE("shape [" + std::to_string(k.b) + ", " + std::to_string(k.h) + ", " +
                 std::to_string(k.sq) + ", " + std::to_string(k.sk) + "]");
    const Shape shape{k.b, k.h, k.sq, k.sk};
    // Real probabilities (from the CPU forward, causal and padded) and a random upstream grad.
    Tensor probs = Tensor::empty(shape, ct);
    kernels::scaled_masked_softmax_forward(for_cpu(random_tensor(shape, dt, seed++, -3.0, 3.0)),
                                           1.f, true, make_pad(k.b, k.sk), probs);
    const Tensor probs_dt = gpu_test::from_double(to_double(probs), shape, dt);
    const Tensor dprobs = random_tensor(shape, dt, seed++);

    Tensor ref = Tensor::empty(shape, ct);
    kernels::scaled_masked_softmax_backward(for_cpu(dprobs), for_cpu(probs_dt), scale, ref);
    const Tensor pg = on_gpu(probs_dt), dpg = on_gpu(dprobs);
    Tensor ds = Tensor::empty(shape, dt, gpu());
    MT_GPU_KERNEL(dt, scaled_masked_softmax_backward, dpg, pg, scale, ds);
    // The row dot Σ dp·p is summed in another order: absolute error ~ scale·p·1e-6.
    EXPECT_TRUE(close(ds, ref, 1e-6, out_rtol(dt)));
    Tensor inplace = on_gpu(dprobs);  // dscores aliases dprobs
    MT_GPU_KERNEL(dt, scaled_masked_softmax_backward, inplace, pg, scale, inplace);
    EXPECT_TRUE(gpu_test::bit_equal(inplace, ds));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SoftmaxGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
