// The mixture-of-experts kernels on the GPU against their CPU twins (kernels/moe_router.h,
// kernels/moe_sinkhorn.h, kernels/sigmoid_gate.h, kernels/moe_permute.h): the router's choices
// (the same experts), weights and gradients, the weights of given choices, the Sinkhorn choice,
// the shared expert's sigmoid gate, the load-balancing statistics and the z-loss, the expert
// bias's update; the slot
// assignment (the same slots, dropless and with both drop policies) and the gathers in f32 and
// bf16, the same bits where the arithmetic is the same (copies, sums in order) and within rounding
// elsewhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/moe_permute.h"
#include "kernels/moe_router.h"
#include "kernels/moe_sinkhorn.h"
#include "kernels/sigmoid_gate.h"

namespace megatron {
namespace {

using gpu_test::bit_equal;
using gpu_test::close;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::random_tensor;

TEST(MoeRouterGpuTest, RoutingLossesAndGradientsMatchCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 37, e = 12;
  const Tensor logits = random_tensor({n, e}, DType::F32, 1, -2.0, 2.0);
  const Tensor bias = random_tensor({e}, DType::F32, 2, -0.2, 0.2);
  const Tensor dprobs0 = random_tensor({n, 4}, DType::F32, 3);
  const std::vector<kernels::MoeTopkParams> cases = {
      {.topk = 2},
      {.topk = 3, .pre_softmax = true},
      {.topk = 4, .sigmoid = true, .scaling_factor = 2.5f},
      {.topk = 4, .num_groups = 4, .group_topk = 2}};
  const Tensor lg = on_gpu(logits);
  for (const kernels::MoeTopkParams& p : cases) {
    SCOPED_TRACE(::testing::Message() << "k=" << p.topk << " sigmoid=" << p.sigmoid
                                      << " pre=" << p.pre_softmax << " groups=" << p.num_groups);
    const int64_t k = p.topk;
    const Tensor b = p.sigmoid ? bias : Tensor();
    Tensor idx = Tensor::empty({n, k}, DType::I32), probs = Tensor::empty({n, k}, DType::F32);
    kernels::moe_topk_forward(logits, b, p, idx, probs);
    Tensor idx_g = Tensor::empty({n, k}, DType::I32, gpu());
    Tensor probs_g = Tensor::empty({n, k}, DType::F32, gpu());
    kernels::moe_topk_forward(lg, p.sigmoid ? on_gpu(bias) : Tensor(), p, idx_g, probs_g);
    EXPECT_TRUE(bit_equal(idx_g, idx));
    EXPECT_TRUE(close(probs_g, probs, 1e-7, 1e-6));
    if (p.num_groups == 0) {
      Tensor given_g = Tensor::empty({n, k}, DType::F32, gpu());
      kernels::moe_topk_weights(lg, idx_g, p, given_g);
      EXPECT_TRUE(close(given_g, probs, 1e-7, 1e-6));
    }

    const Tensor dprobs = dprobs0.slice(1, 0, k).clone();
    Tensor dl = Tensor::zeros({n, e}, DType::F32), dl_g = Tensor::zeros({n, e}, DType::F32, gpu());
    kernels::moe_topk_backward(dprobs, logits, idx, p, dl);
    kernels::moe_topk_backward(on_gpu(dprobs), lg, idx_g, p, dl_g);
    EXPECT_TRUE(close(dl_g, dl, 1e-7, 1e-5));
  }
  for (bool sig : {false, true}) {
    SCOPED_TRACE(sig ? "sigmoid" : "softmax");
    Tensor counts = Tensor::empty({1, e}, DType::F32), sums = Tensor::empty({1, e}, DType::F32);
    Tensor counts_g = Tensor::empty({1, e}, DType::F32, gpu());
    Tensor sums_g = Tensor::empty({1, e}, DType::F32, gpu());
    kernels::moe_aux_loss_stats(logits, 2, sig, 1, counts, sums);
    kernels::moe_aux_loss_stats(lg, 2, sig, 1, counts_g, sums_g);
    EXPECT_TRUE(bit_equal(counts_g, counts));
    EXPECT_TRUE(close(sums_g, sums, 1e-6, 1e-6));
    const Tensor w = random_tensor({1, e}, DType::F32, 4);
    Tensor dl = Tensor::zeros({n, e}, DType::F32), dl_g = Tensor::zeros({n, e}, DType::F32, gpu());
    kernels::moe_aux_loss_backward(logits, w, sig, dl);
    kernels::moe_aux_loss_backward(lg, on_gpu(w), sig, dl_g);
    EXPECT_TRUE(close(dl_g, dl, 1e-7, 1e-5));
  }
  EXPECT_NEAR(kernels::moe_z_loss_sum(lg), kernels::moe_z_loss_sum(logits),
              1e-12 * kernels::moe_z_loss_sum(logits));
  Tensor dz = Tensor::zeros({n, e}, DType::F32), dz_g = Tensor::zeros({n, e}, DType::F32, gpu());
  kernels::moe_z_loss_backward(logits, 0.3f, dz);
  kernels::moe_z_loss_backward(lg, 0.3f, dz_g);
  EXPECT_TRUE(close(dz_g, dz, 1e-7, 1e-5));
}

TEST(MoeRouterGpuTest, SinkhornChoiceMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 45, e = 11;
  const Tensor logits = random_tensor({n, e}, DType::F32, 5, -3.0, 3.0);
  for (int64_t k : {int64_t(1), int64_t(3)}) {
    SCOPED_TRACE(k);
    Tensor idx = Tensor::empty({n, k}, DType::I32),
           idx_g = Tensor::empty({n, k}, DType::I32, gpu());
    kernels::moe_sinkhorn_topk(logits, k, idx);
    kernels::moe_sinkhorn_topk(on_gpu(logits), k, idx_g);
    EXPECT_TRUE(bit_equal(idx_g, idx));
  }
}

// The aux-loss-free bias update: integer counts (with rows where some sit at the mean), the
// same bits as the CPU.
TEST(MoeRouterGpuTest, ExpertBiasUpdateMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t rows = 5, e = 12;
  std::vector<float> counts(size_t(rows * e));
  std::mt19937 gen(7);
  for (float& c : counts) c = float(gen() % 9);
  for (int64_t c = 0; c < e; ++c) counts[size_t(2 * e + c)] = 4.0f;  // a balanced router
  const Tensor tokens = Tensor::from_vector(counts, {rows, e});
  Tensor bias = random_tensor({rows, e}, DType::F32, 8, -0.5, 0.5);
  Tensor bias_g = on_gpu(bias);
  kernels::moe_expert_bias_update(tokens, 1e-3f, bias);
  kernels::moe_expert_bias_update(on_gpu(tokens), 1e-3f, bias_g);
  EXPECT_TRUE(bit_equal(bias_g, bias));
}

TEST(SigmoidGateGpuTest, ForwardAndBackwardMatchCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 19, c = 40;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor y = random_tensor({n, c}, dt, 6),
                 logits = random_tensor({n}, DType::F32, 7, -3, 3);
    const Tensor out0 = random_tensor({n, c}, dt, 8), dout = random_tensor({n, c}, dt, 9);
    Tensor out = out0.clone(), out_g = on_gpu(out0);
    kernels::sigmoid_gate_forward(y, logits, out);
    kernels::sigmoid_gate_forward(on_gpu(y), on_gpu(logits), out_g);
    // One rounding of the same f32 arithmetic apart at most (a bf16 step when it falls there).
    const double tol = dt == DType::F32 ? 1e-6 : 1.0 / 128;
    EXPECT_TRUE(close(out_g, out, tol, tol));
    Tensor dy = Tensor::empty({n, c}, dt), dl = Tensor::empty({n}, DType::F32);
    Tensor dy_g = Tensor::empty({n, c}, dt, gpu()), dl_g = Tensor::empty({n}, DType::F32, gpu());
    kernels::sigmoid_gate_backward(dout, y, logits, dy, dl);
    kernels::sigmoid_gate_backward(on_gpu(dout), on_gpu(y), on_gpu(logits), dy_g, dl_g);
    EXPECT_TRUE(close(dy_g, dy, tol, tol));
    EXPECT_TRUE(close(dl_g, dl, 1e-7, 1e-6));
  }
}

TEST(MoePermuteGpuTest, SlotsAndGathersMatchCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 29, k = 2, e = 6, h = 37;
  Tensor idx = Tensor::empty({n, k}, DType::I32);
  std::mt19937_64 gen(5);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> perm(static_cast<size_t>(e));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), gen);
    for (int64_t j = 0; j < k; ++j) idx.data<int32_t>()[t * k + j] = perm[size_t(j)];
  }
  const Tensor probs = random_tensor({n, k}, DType::F32, 6, 0.0, 1.0);
  Tensor counts = Tensor::empty({e}, DType::I64), counts_g = Tensor::empty({e}, DType::I64, gpu());
  const Tensor idx_g = on_gpu(idx);
  kernels::moe_expert_counts(idx, e, counts);
  kernels::moe_expert_counts(idx_g, e, counts_g);
  EXPECT_TRUE(bit_equal(counts_g, counts));
  const std::vector<int64_t> c = counts.to_vector<int64_t>();
  for (int64_t capacity : {int64_t(0), int64_t(8)})
    for (bool by_probs : {false, true})
      for (DType dt : {DType::F32, DType::BF16}) {
        SCOPED_TRACE(::testing::Message()
                     << "capacity=" << capacity << " probs=" << by_probs << " " << dtype_name(dt));
        std::vector<int64_t> slots = {0};
        for (int64_t x : c) slots.push_back(slots.back() + (capacity > 0 ? capacity : x));
        const int64_t m = slots.back();
        const Tensor p = by_probs ? probs : Tensor();
        Tensor src = Tensor::empty({m}, DType::I32), of = Tensor::empty({n * k}, DType::I32);
        Tensor src_g = Tensor::empty({m}, DType::I32, gpu());
        Tensor of_g = Tensor::empty({n * k}, DType::I32, gpu());
        kernels::moe_assign_slots(idx, p, slots, src, of);
        kernels::moe_assign_slots(idx_g, by_probs ? on_gpu(probs) : Tensor(), slots, src_g, of_g);
        EXPECT_TRUE(bit_equal(src_g, src));
        EXPECT_TRUE(bit_equal(of_g, of));

        const Tensor x = random_tensor({n, h}, dt, 7), y = random_tensor({m, h}, dt, 8);
        const Tensor dout = random_tensor({n, h}, dt, 9);
        Tensor perm = Tensor::empty({m, h}, dt), perm_g = Tensor::empty({m, h}, dt, gpu());
        kernels::moe_permute(x, src, k, perm);
        kernels::moe_permute(on_gpu(x), src_g, k, perm_g);
        EXPECT_TRUE(bit_equal(perm_g, perm));
        Tensor dx = Tensor::empty({n, h}, dt), dx_g = Tensor::empty({n, h}, dt, gpu());
        kernels::moe_permute_backward(y, of, k, dx);
        kernels::moe_permute_backward(on_gpu(y), of_g, k, dx_g);
        EXPECT_TRUE(bit_equal(dx_g, dx));
        Tensor out = Tensor::empty({n, h}, dt), out_g = Tensor::empty({n, h}, dt, gpu());
        kernels::moe_unpermute(y, of, probs, out);
        kernels::moe_unpermute(on_gpu(y), of_g, on_gpu(probs), out_g);
        EXPECT_TRUE(close(out_g, out, 1e-6, dt == DType::F32 ? 1e-6 : 1e-2));
        Tensor dy = Tensor::empty({m, h}, dt), dy_g = Tensor::empty({m, h}, dt, gpu());
        Tensor dp = Tensor::empty({n, k}, DType::F32);
        Tensor dp_g = Tensor::empty({n, k}, DType::F32, gpu());
        kernels::moe_unpermute_backward(dout, y, src, of, probs, dy, dp);
        kernels::moe_unpermute_backward(on_gpu(dout), on_gpu(y), src_g, of_g, on_gpu(probs), dy_g,
                                        dp_g);
        EXPECT_TRUE(bit_equal(dy_g, dy));
        EXPECT_TRUE(close(dp_g, dp, 1e-6, 1e-6));
      }
}

}  // namespace
}  // namespace megatron
