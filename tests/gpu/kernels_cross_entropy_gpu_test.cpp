// Vocab-sharded cross-entropy on the GPU against its CPU twin, f32/bf16/f16, piece by piece on
// equal inputs: row max and target logit (exact: bit for bit), Σ exp (to rounding), loss, and
// the backward (also in place, dlogits aliasing logits). Shards with padding columns, a
// vocab_start offset, no valid column at all, targets inside and outside the shard, widths of
// every launch shape (warp rows <= 1024, 256- and 512-thread rows), huge logits.
#include <gtest/gtest.h>

#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/cross_entropy.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::for_cpu;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::out_rtol;
using gpu_test::random_tensor;

struct Case {
  int64_t n, width, valid, vocab_start;
};

const std::vector<Case> kCases = {
    {13, 37, 37, 0},        {13, 37, 31, 0},       {17, 40, 34, 34},
    {11, 40, 0, 68},        {1, 13, 13, 0},        {77, 1024, 1000, 0},
    {11, 2053, 2050, 4106}, {5, 9001, 8999, 9001}, {11 * 3, 129, 128, 128}};

// Targets: in this shard, before it, after it, and on its padding columns (owned elsewhere).
Tensor make_targets(const Case& k) {
  std::vector<int32_t> t(size_t(k.n));
  for (int64_t r = 0; r < k.n; ++r) {
    switch (r % 4) {
      case 0:
        t[size_t(r)] = int32_t(k.vocab_start + (k.valid ? (r * 7) % k.valid : 0));
        break;
      case 1:
        t[size_t(r)] = int32_t(k.vocab_start > 0 ? k.vocab_start - 1 : 0);
        break;
      case 2:
        t[size_t(r)] = int32_t(k.vocab_start + k.width + r);
        break;
      default:
        t[size_t(r)] = int32_t(k.vocab_start + k.valid);
        break;
    }
  }
  return Tensor::from_vector(t, {k.n});
}

std::string name(const Case& k) {
  return "N=" + std::to_string(k.n) + " width=" + std::to_string(k.width) +
         " valid=" + std::to_string(k.valid) + " start=" + std::to_string(k.vocab_start);
}

class CrossEntropyGpuTest : public ::testing::TestWithParam<DType> {};

TEST_P(CrossEntropyGpuTest, PiecesMatchCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const DType dt = GetParam();
  uint64_t seed = 1;
  for (const Case& k : kCases)
    for (double range : {8.0, 1000.0}) {
      SCOPED_TRACE(name(k) + " range=" + std::to_string(range));
      const Tensor logits = random_tensor({k.n, k.width}, dt, seed++, -range, range);
      const Tensor targets = make_targets(k);
      const Tensor lc = for_cpu(logits);
      const Tensor lg = on_gpu(logits), tg = on_gpu(targets);

      // Row max: a max is exact, so the bits agree (f16 widened to f32 exactly).
      Tensor max_ref = Tensor::empty({k.n}, DType::F32);
      kernels::cross_entropy_row_max(lc, k.valid, max_ref);
      Tensor mx = Tensor::empty({k.n}, DType::F32, gpu());
      MT_GPU_KERNEL(dt, cross_entropy_row_max, lg, k.valid, mx);
      EXPECT_TRUE(gpu_test::bit_equal(mx, max_ref));

      // Σ exp and the target logit, given the (CPU's) row max; a shard with no valid column
      // would get the global max from another shard: use 0 there.
      Tensor gmax = k.valid ? max_ref : Tensor::zeros({k.n}, DType::F32);
      Tensor se_ref = Tensor::empty({k.n}, DType::F32), tl_ref = Tensor::empty({k.n}, DType::F32);
      kernels::cross_entropy_sum_exp_target(lc, targets, k.vocab_start, k.valid, gmax, se_ref,
                                            tl_ref);
      const Tensor gmax_g = on_gpu(gmax);
      Tensor se = Tensor::empty({k.n}, DType::F32, gpu()),
             tl = Tensor::empty({k.n}, DType::F32, gpu());
      MT_GPU_KERNEL(dt, cross_entropy_sum_exp_target, lg, tg, k.vocab_start, k.valid, gmax_g, se,
                    tl);
      EXPECT_TRUE(close(se, se_ref, 1e-6, 1e-5));
      EXPECT_TRUE(gpu_test::bit_equal(tl, tl_ref));
      if (k.valid == 0) continue;  // no loss or gradient from an empty shard alone

      // Loss on the CPU's statistics.
      Tensor loss_ref = Tensor::empty({k.n}, DType::F32);
      kernels::cross_entropy_loss(max_ref, se_ref, tl_ref, loss_ref);
      const Tensor mg = on_gpu(max_ref), sg = on_gpu(se_ref), tlg = on_gpu(tl_ref);
      Tensor loss = Tensor::empty({k.n}, DType::F32, gpu());
      kernels::cross_entropy_loss(mg, sg, tlg, loss);  // f32 only: the public kernel
      // logf and std::log may differ by an ulp, which + max (up to ~range) can round to one ulp
      // of the max.
      EXPECT_TRUE(close(loss, loss_ref, 1e-6 + 2e-7 * range, 1e-6));

      // Backward on the CPU's statistics; then in place.
      const Tensor dloss = random_tensor({k.n}, DType::F32, seed++, 0.1, 2.0);
      Tensor dl_ref = Tensor::empty({k.n, k.width}, gpu_test::cpu_dtype(dt));
      kernels::cross_entropy_backward(lc, targets, k.vocab_start, k.valid, max_ref, se_ref, dloss,
                                      dl_ref);
      const Tensor dlg = on_gpu(dloss);
      Tensor dlogits = Tensor::empty({k.n, k.width}, dt, gpu());
      MT_GPU_KERNEL(dt, cross_entropy_backward, lg, tg, k.vocab_start, k.valid, mg, sg, dlg,
                    dlogits);
      EXPECT_TRUE(close(dlogits, dl_ref, 1e-6, out_rtol(dt)));
      Tensor inplace = on_gpu(logits);  // dlogits aliases logits
      MT_GPU_KERNEL(dt, cross_entropy_backward, inplace, tg, k.vocab_start, k.valid, mg, sg, dlg,
                    inplace);
      EXPECT_TRUE(gpu_test::bit_equal(inplace, dlogits));
    }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CrossEntropyGpuTest, MT_GPU_DTYPES, gpu_test::dtype_param_name);

}  // namespace
}  // namespace megatron
