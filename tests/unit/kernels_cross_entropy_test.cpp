// Vocab-sharded cross-entropy: 3 shards reduced by hand equal the unsharded double-precision
// loss; huge logits do not overflow; padding columns never count; the backward matches
// central differences of the double loss.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/cross_entropy.h"

namespace megatron {
namespace {

using test::random_tensor;
using test::to_double;

// loss[n] = logsumexp(logits[n, :V]) − logits[n, t[n]], in double over the real vocabulary.
std::vector<double> reference(const std::vector<double>& logits, int64_t n, int64_t v,
                              const std::vector<int32_t>& t) {
  std::vector<double> loss(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    double mx = -INFINITY, s = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, logits[size_t(r * v + j)]);
    for (int64_t j = 0; j < v; ++j) s += std::exp(logits[size_t(r * v + j)] - mx);
    loss[size_t(r)] = std::log(s) + mx - logits[size_t(r * v + t[size_t(r)])];
  }
  return loss;
}

struct Shard {
  int64_t start, valid, width;  // global first column, real columns, padded width
};

// Runs the kernels on each shard of `full` [N, V] (padding columns filled with `pad_value`),
// reduces max / sum_exp / target_logit across shards by hand, and returns the loss.
std::vector<double> sharded_loss(const std::vector<double>& full, int64_t n, int64_t v,
                                 const std::vector<Shard>& shards, const Tensor& targets, DType dt,
                                 double pad_value, std::vector<Tensor>* logits_out, Tensor* max_out,
                                 Tensor* sum_out) {
  std::vector<Tensor> logits;
  std::vector<double> gmax(size_t(n), -INFINITY), gsum(size_t(n), 0), gtarget(size_t(n), 0);
  for (const Shard& s : shards) {
    std::vector<double> local(size_t(n * s.width), pad_value);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < s.valid; ++j)
        local[size_t(r * s.width + j)] = full[size_t(r * v + s.start + j)];
    logits.push_back(test::from_double(local, {n, s.width}, dt));
    Tensor mx = Tensor::empty({n}, DType::F32);
    kernels::cross_entropy_row_max(logits.back(), s.valid, mx);
    for (int64_t r = 0; r < n; ++r)
      gmax[size_t(r)] = std::max(gmax[size_t(r)], double(mx.data<float>()[r]));
  }
  Tensor gmax_t = test::from_double(gmax, {n}, DType::F32);
  for (size_t k = 0; k < shards.size(); ++k) {
    Tensor se = Tensor::empty({n}, DType::F32), tl = Tensor::empty({n}, DType::F32);
    kernels::cross_entropy_sum_exp_target(logits[k], targets, shards[k].start, shards[k].valid,
                                          gmax_t, se, tl);
    for (int64_t r = 0; r < n; ++r) {
      gsum[size_t(r)] += se.data<float>()[r];
      gtarget[size_t(r)] += tl.data<float>()[r];
    }
  }
  Tensor sum_t = test::from_double(gsum, {n}, DType::F32);
  Tensor loss = Tensor::empty({n}, DType::F32);
  kernels::cross_entropy_loss(gmax_t, sum_t, test::from_double(gtarget, {n}, DType::F32), loss);
  if (logits_out) *logits_out = logits;
  if (max_out) *max_out = gmax_t;
  if (sum_out) *sum_out = sum_t;
  return to_double(loss);
}

class CrossEntropyTest : public ::testing::TestWithParam<DType> {};

TEST_P(CrossEntropyTest, ThreeShardsEqualUnshardedLoss) {
  const DType dt = GetParam();
  const int64_t n = 13, v = 50;
  // Shards of 17 + 17 + 16 real columns, each padded to 17 (the last has a padding column
  // holding a huge value that must be ignored).
  const std::vector<Shard> shards = {{0, 17, 17}, {17, 17, 17}, {34, 16, 17}};
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) t[size_t(r)] = int32_t((r * 7 + 3) % v);
  t[0] = 49;  // the last real column
  Tensor targets = Tensor::from_vector(t, {n});
  for (double range : {4.0, 1000.0}) {
    Tensor full_t = random_tensor({n, v}, dt, 1, -range, range);
    const auto full = to_double(full_t);  // already rounded to dt
    const auto loss = sharded_loss(full, n, v, shards, targets, dt, 1e4, nullptr, nullptr, nullptr);
    const auto expected = reference(full, n, v, t);
    // f32 statistics: exp/log relative error ~1e-6 of the O(range) terms.
    EXPECT_CLOSE(loss, expected, 1e-5 * range, 1e-5) << "range " << range;
    for (double l : loss) EXPECT_TRUE(std::isfinite(l));
  }
}

TEST_P(CrossEntropyTest, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  const int64_t n = 5, v = 11;
  const std::vector<Shard> shards = {{0, 4, 5}, {4, 4, 5}, {8, 3, 5}};
  std::vector<int32_t> t = {0, 10, 4, 7, 3};
  Tensor targets = Tensor::from_vector(t, {n});
  Tensor full_t = random_tensor({n, v}, dt, 2, -3.0, 3.0);
  const auto full = to_double(full_t);
  std::vector<Tensor> logits;
  Tensor gmax, gsum;
  sharded_loss(full, n, v, shards, targets, dt, -7.0, &logits, &gmax, &gsum);
  Tensor dloss = random_tensor({n}, DType::F32, 3);
  const auto w = to_double(dloss);
  const auto expected = test::numeric_grad(
      [&](const std::vector<double>& x) { return test::dot(w, reference(x, n, v, t)); }, full);
  for (size_t k = 0; k < shards.size(); ++k) {
    // In place: dlogits aliases the logits, as the model does.
    Tensor& l = logits[k];
    kernels::cross_entropy_backward(l, targets, shards[k].start, shards[k].valid, gmax, gsum, dloss,
                                    l);
    const auto got = to_double(l);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t j = 0; j < shards[k].valid; ++j)
        EXPECT_NEAR(got[size_t(r * shards[k].width + j)],
                    expected[size_t(r * v + shards[k].start + j)],
                    dt == DType::BF16 ? test::kBf16Eps : 1e-5)
            << "shard " << k << " row " << r << " col " << j;
      for (int64_t j = shards[k].valid; j < shards[k].width; ++j)
        EXPECT_EQ(got[size_t(r * shards[k].width + j)], 0.0) << "padding column has a gradient";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CrossEntropyTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CrossEntropy, ShardWithoutRealColumnsHasNegInfMax) {
  Tensor logits = test::from_double({1, 2, 3, 4}, {2, 2}, DType::F32);
  Tensor mx = Tensor::empty({2}, DType::F32);
  kernels::cross_entropy_row_max(logits, 0, mx);
  EXPECT_EQ(mx.data<float>()[0], -INFINITY);
  EXPECT_THROW(kernels::cross_entropy_row_max(logits, 3, mx), Error);  // valid_cols > V_local
}

}  // namespace
}  // namespace megatron
