// Fused AdamW on the GPU against the CPU twin: same hyper-parameters, same inputs, one step at
// several step counts and a chain of steps. The GPU rounds every operation as written; the CPU
// compiler may fuse some multiply-adds, so the two agree to a few f32 ulps, not always to the
// bit.
#include <gtest/gtest.h>

#include <cmath>

#include "gpu_test_util.h"
#include "kernels/adamw.h"

namespace megatron {
namespace {

using gpu_test::on_gpu;
using gpu_test::random_tensor;
using gpu_test::to_double;

struct State {
  Tensor p, g, m, v;
};

State random_state(int64_t n, uint64_t seed) {
  return {random_tensor({n}, DType::F32, seed, -1.0, 1.0),
          random_tensor({n}, DType::F32, seed + 1, -0.1, 0.1),
          random_tensor({n}, DType::F32, seed + 2, -0.01, 0.01),
          random_tensor({n}, DType::F32, seed + 3, 0.0, 1e-4)};
}

// One step from `before`: each result within 2^-20 (8 f32 ulps) of the magnitudes of the terms
// that make it (so that cancellation, e.g. β1·m ≈ −(1−β1)·g, does not inflate the relative
// error), the parameter also within that of its update.
void expect_step_close(const State& gpu, const State& cpu, const State& before,
                       const kernels::AdamWHyper& h) {
  const double r = std::ldexp(1.0, -20);
  const std::vector<double> p = to_double(before.p), g = to_double(before.g),
                            m = to_double(before.m), v = to_double(before.v),
                            v_new = to_double(cpu.v);
  const double bc1 = 1.0 - std::pow(double(h.beta1), double(h.step));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(double(h.beta2), double(h.step)));
  const double decay = 1.0 - double(h.lr) * double(h.weight_decay);
  std::vector<double> tol_m(p.size()), tol_v(p.size()), tol_p(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const double m_terms = std::abs(h.beta1 * m[i]) + std::abs((1.0 - h.beta1) * g[i]);
    tol_m[i] = r * m_terms + 1e-30;
    tol_v[i] = r * (std::abs(h.beta2 * v[i]) + (1.0 - h.beta2) * g[i] * g[i]) + 1e-30;
    const double denom = std::sqrt(v_new[i]) / bc2_sqrt + double(h.eps);
    tol_p[i] = r * (std::abs(p[i] * decay) + double(h.lr) / bc1 * m_terms / denom) + 1e-30;
  }
  EXPECT_TRUE(gpu_test::within(to_double(gpu.m), to_double(cpu.m), tol_m)) << "exp_avg";
  EXPECT_TRUE(gpu_test::within(to_double(gpu.v), to_double(cpu.v), tol_v)) << "exp_avg_sq";
  EXPECT_TRUE(gpu_test::within(to_double(gpu.p), to_double(cpu.p), tol_p)) << "param";
}

TEST(GpuAdamW, MatchesCpuAtSeveralSteps) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 100003;
  for (int64_t step : {int64_t(1), int64_t(2), int64_t(10), int64_t(1000), int64_t(100000)})
    for (float wd : {0.f, 0.1f}) {
      SCOPED_TRACE(::testing::Message() << "step " << step << " weight_decay " << wd);
      const kernels::AdamWHyper h{1e-3f, 0.9f, 0.999f, 1e-8f, wd, step};
      const State s = random_state(n, uint64_t(step));
      State cpu{s.p.clone(), s.g, s.m.clone(), s.v.clone()};
      kernels::adamw_update(cpu.p, cpu.g, cpu.m, cpu.v, h);
      State gpu{on_gpu(s.p), on_gpu(s.g), on_gpu(s.m), on_gpu(s.v)};
      kernels::adamw_update(gpu.p, gpu.g, gpu.m, gpu.v, h);
      expect_step_close(gpu, cpu, s, h);
    }
}

TEST(GpuAdamW, ChainOfStepsStaysClose) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 4099;
  const State s = random_state(n, 77);
  State cpu{s.p.clone(), s.g, s.m.clone(), s.v.clone()};
  State gpu{on_gpu(s.p), on_gpu(s.g), on_gpu(s.m), on_gpu(s.v)};
  for (int64_t step = 1; step <= 5; ++step) {
    const kernels::AdamWHyper h{3e-4f, 0.9f, 0.95f, 1e-8f, 0.01f, step};
    const Tensor g = random_tensor({n}, DType::F32, 1000 + uint64_t(step), -0.1, 0.1);
    cpu.g = g;
    gpu.g = on_gpu(g);
    kernels::adamw_update(cpu.p, cpu.g, cpu.m, cpu.v, h);
    kernels::adamw_update(gpu.p, gpu.g, gpu.m, gpu.v, h);
  }
  // Some ulps per step of each state's scale (|p| < 1.1, |m| < 0.1, v < 1e-2).
  const double r = std::ldexp(1.0, -16);
  EXPECT_TRUE(gpu_test::close(to_double(gpu.p), to_double(cpu.p), r, 0.0)) << "param";
  EXPECT_TRUE(gpu_test::close(to_double(gpu.m), to_double(cpu.m), r * 0.1, 0.0)) << "exp_avg";
  EXPECT_TRUE(gpu_test::close(to_double(gpu.v), to_double(cpu.v), r * 1e-2, 0.0)) << "exp_avg_sq";
}

}  // namespace
}  // namespace megatron
