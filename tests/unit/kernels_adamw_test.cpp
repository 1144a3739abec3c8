// Fused AdamW against a hand-written double-precision torch.optim.AdamW for several steps.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/adamw.h"

namespace megatron {
namespace {

using test::random_tensor;
using test::to_double;

TEST(AdamW, MatchesDoubleReferenceOverSteps) {
  const int64_t n = 1000 + 13;
  const kernels::AdamWHyper base{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1};
  Tensor p = random_tensor({n}, DType::F32, 1), m = Tensor::zeros({n}, DType::F32),
         v = Tensor::zeros({n}, DType::F32);
  std::vector<double> pd = to_double(p), md(size_t(n), 0.0), vd(size_t(n), 0.0);
  for (int64_t step = 1; step <= 5; ++step) {
    Tensor g = random_tensor({n}, DType::F32, 100 + uint64_t(step), -0.1, 0.1);
    const auto gd = to_double(g);
    kernels::AdamWHyper h = base;
    h.step = step;
    kernels::adamw_update(p, g, m, v, h);
    const double b1 = h.beta1, b2 = h.beta2, lr = h.lr;
    for (size_t i = 0; i < size_t(n); ++i) {
      pd[i] *= 1 - lr * double(h.weight_decay);
      md[i] = b1 * md[i] + (1 - b1) * gd[i];
      vd[i] = b2 * vd[i] + (1 - b2) * gd[i] * gd[i];
      const double mhat = md[i] / (1 - std::pow(b1, double(step)));
      const double vhat = vd[i] / (1 - std::pow(b2, double(step)));
      pd[i] -= lr * mhat / (std::sqrt(vhat) + double(h.eps));
    }
    EXPECT_CLOSE(to_double(m), md, 1e-9, 1e-5) << "step " << step;
    EXPECT_CLOSE(to_double(v), vd, 1e-12, 1e-5) << "step " << step;
    // Each step moves p by ~lr; f32 rounding of p (~6e-8 relative) dominates.
    EXPECT_CLOSE(to_double(p), pd, 1e-6, 1e-5) << "step " << step;
  }
}

// The runs form (one pass, per-run weight decay) gives, to the bit, what one call per run
// gives, and leaves elements outside every run alone.
TEST(AdamW, RunsMatchOneCallPerRun) {
  const int64_t n = 4096 + 37;
  const std::vector<kernels::AdamWRun> runs{
      {0, 1000, true}, {1000, 1003, false}, {1010, 3000, true}, {3000, n, false}};
  const kernels::AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3};
  Tensor p = random_tensor({n}, DType::F32, 1), g = random_tensor({n}, DType::F32, 2, -0.1, 0.1);
  Tensor m = random_tensor({n}, DType::F32, 3, -0.01, 0.01);
  Tensor v = random_tensor({n}, DType::F32, 4, 0.0, 1e-4);
  Tensor p1 = p.clone(), m1 = m.clone(), v1 = v.clone();
  kernels::adamw_update(p, g, m, v, h, runs);
  for (const kernels::AdamWRun& r : runs) {
    kernels::AdamWHyper hr = h;
    hr.weight_decay = r.decay ? h.weight_decay : 0.f;
    Tensor pr = p1.slice(0, r.begin, r.end), mr = m1.slice(0, r.begin, r.end),
           vr = v1.slice(0, r.begin, r.end);
    kernels::adamw_update(pr, g.slice(0, r.begin, r.end), mr, vr, hr);
  }
  EXPECT_EQ(to_double(p), to_double(p1));
  EXPECT_EQ(to_double(m), to_double(m1));
  EXPECT_EQ(to_double(v), to_double(v1));
}

TEST(AdamW, RejectsOverlappingOrOutOfRangeRuns) {
  Tensor p = Tensor::zeros({8}, DType::F32), g = Tensor::zeros({8}, DType::F32);
  Tensor m = Tensor::zeros({8}, DType::F32), v = Tensor::zeros({8}, DType::F32);
  const kernels::AdamWHyper h{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1};
  EXPECT_THROW(kernels::adamw_update(p, g, m, v, h, {{0, 5, true}, {4, 8, false}}), Error);
  EXPECT_THROW(kernels::adamw_update(p, g, m, v, h, {{0, 9, true}}), Error);
}

TEST(AdamW, RejectsMismatchedBuffers) {
  Tensor p = Tensor::zeros({4}, DType::F32), g = Tensor::zeros({5}, DType::F32);
  Tensor m = Tensor::zeros({4}, DType::F32), v = Tensor::zeros({4}, DType::F32);
  EXPECT_THROW(kernels::adamw_update(p, g, m, v, {1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1}), Error);
  Tensor g4 = Tensor::zeros({4}, DType::F32);
  EXPECT_THROW(kernels::adamw_update(p, g4, m, v, {1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 0}), Error);
}

}  // namespace
}  // namespace megatron
