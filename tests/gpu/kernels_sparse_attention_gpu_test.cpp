// DSA's kernels (kernels/sparse_attention.h) on the GPU against their CPU twins (f32 only, as
// the contract): the indexer's scores and their backward, the top-k key mask bit for bit (ties
// included, Sq < Sk, rows past the warp width), the indexer KL loss and gradient with and
// without a key mask; and the softmax's per-query key mask.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/device_runtime.h"
#include "gpu_test_compare.h"
#include "kernels/softmax.h"
#include "kernels/sparse_attention.h"

namespace megatron {
namespace {

using gpu_test::close;
using gpu_test::gpu;
using gpu_test::on_gpu;
using gpu_test::random_tensor;

struct Case {
  int64_t b, h, sq, sk, k;
};
// Odd sizes, Sq < Sk, and a row of more keys than one warp takes (1024).
const std::vector<Case> kCases = {{2, 3, 13, 13, 4}, {1, 2, 5, 17, 3}, {1, 1, 3, 1500, 700}};

TEST(SparseAttentionGpu, IndexScoresMatchCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  uint64_t seed = 1;
  for (const Case& c : kCases)
    for (bool relu : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << c.b << "x" << c.h << "x" << c.sq << "x" << c.sk << " relu=" << relu);
      const Tensor raw = random_tensor({c.b, c.h, c.sq, c.sk}, DType::F32, seed++);
      const Tensor w = random_tensor({c.sq, c.b, c.h}, DType::F32, seed++);
      const Tensor ds = random_tensor({c.b, c.sq, c.sk}, DType::F32, seed++);
      Tensor scores = Tensor::empty({c.b, c.sq, c.sk}, DType::F32);
      kernels::index_scores(raw, w, relu, scores);
      Tensor draw = Tensor::empty(raw.shape(), DType::F32),
             dw = Tensor::empty(w.shape(), DType::F32);
      kernels::index_scores_backward(ds, raw, w, relu, draw, dw);
      const Tensor raw_g = on_gpu(raw), w_g = on_gpu(w), ds_g = on_gpu(ds);
      Tensor scores_g = Tensor::empty(scores.shape(), DType::F32, gpu());
      kernels::index_scores(raw_g, w_g, relu, scores_g);
      EXPECT_TRUE(close(scores_g, scores, 1e-6, 1e-6));
      Tensor draw_g = Tensor::empty(raw.shape(), DType::F32, gpu());
      Tensor dw_g = Tensor::empty(w.shape(), DType::F32, gpu());
      kernels::index_scores_backward(ds_g, raw_g, w_g, relu, draw_g, dw_g);
      EXPECT_TRUE(close(draw_g, draw, 0, 0));
      EXPECT_TRUE(close(dw_g, dw, 1e-5, 1e-5));  // the row sum in another order
    }
}

TEST(SparseAttentionGpu, TopkKeyMaskIsTheCpuSelection) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  uint64_t seed = 100;
  for (const Case& c : kCases)
    for (bool ties : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << c.b << "x" << c.sq << "x" << c.sk << " k=" << c.k << " ties=" << ties);
      std::vector<double> v =
          gpu_test::to_double(random_tensor({c.b, c.sq, c.sk}, DType::F32, seed++, -3.0, 3.0));
      if (ties)
        for (double& x : v) x = std::round(x);
      const Tensor scores = gpu_test::from_double(v, {c.b, c.sq, c.sk}, DType::F32);
      Tensor mask = Tensor::empty(scores.shape(), DType::U8);
      kernels::topk_key_mask(scores, c.k, mask);
      Tensor mask_g = Tensor::empty(scores.shape(), DType::U8, gpu());
      kernels::topk_key_mask(on_gpu(scores), c.k, mask_g);
      EXPECT_EQ(mask_g.to(Device::CPU).to_vector<uint8_t>(), mask.to_vector<uint8_t>());
    }
}

TEST(SparseAttentionGpu, IndexerKlMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  uint64_t seed = 200;
  for (const Case& c : kCases)
    for (bool sparse : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << c.b << "x" << c.sq << "x" << c.sk << " sparse=" << sparse);
      const Shape shape{c.b, c.sq, c.sk};
      const Tensor scores = random_tensor(shape, DType::F32, seed++, -2.0, 2.0);
      const Tensor target = random_tensor(shape, DType::F32, seed++, 0.0, 3.0);
      Tensor key_mask;
      if (sparse) {
        key_mask = Tensor::empty(shape, DType::U8);
        kernels::topk_key_mask(scores, c.k, key_mask);
      }
      Tensor kl = Tensor::empty({c.b, c.sq}, DType::F32), ds = Tensor::empty(shape, DType::F32);
      kernels::indexer_kl(scores, target, key_mask, kl, ds);
      Tensor kl_g = Tensor::empty({c.b, c.sq}, DType::F32, gpu());
      Tensor ds_g = Tensor::empty(shape, DType::F32, gpu());
      kernels::indexer_kl(on_gpu(scores), on_gpu(target), sparse ? on_gpu(key_mask) : Tensor(),
                          kl_g, ds_g);
      EXPECT_TRUE(close(kl_g, kl, 1e-5, 1e-4));
      EXPECT_TRUE(close(ds_g, ds, 1e-6, 1e-4));
    }
}

TEST(SparseAttentionGpu, SoftmaxPerQueryKeyMaskMatchesCpu) {
  if (megatron::cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  uint64_t seed = 300;
  for (const Case& c : kCases) {
    SCOPED_TRACE(::testing::Message() << c.b << "x" << c.h << "x" << c.sq << "x" << c.sk);
    const Tensor scores = random_tensor({c.b, c.h, c.sq, c.sk}, DType::F32, seed++, -3.0, 3.0);
    Tensor mask = Tensor::empty({c.b, c.sq, c.sk}, DType::U8);
    kernels::topk_key_mask(random_tensor({c.b, c.sq, c.sk}, DType::F32, seed++), c.k, mask);
    Tensor probs = Tensor::empty(scores.shape(), DType::F32);
    kernels::scaled_masked_softmax_forward(scores, 0.25f, true, mask, probs);
    Tensor probs_g = Tensor::empty(scores.shape(), DType::F32, gpu());
    kernels::scaled_masked_softmax_forward(on_gpu(scores), 0.25f, true, on_gpu(mask), probs_g);
    EXPECT_TRUE(close(probs_g, probs, 1e-6, 1e-5));
  }
}

}  // namespace
}  // namespace megatron
