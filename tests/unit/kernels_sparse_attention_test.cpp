// DSA's kernels (kernels/sparse_attention.h) against double loops on odd sizes with top-k
// smaller than the sequence: the indexer's head-weighted (ReLU) scores and their backward
// (against central differences), the top-k key mask (ties to the smaller index, fewer visible
// keys than k, Sq < Sk), the indexer KL loss and its gradient (dense and over a key mask, against
// central differences of the double KL), and the softmax's per-query key mask that the sparse
// attention runs on.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/softmax.h"
#include "kernels/sparse_attention.h"

namespace megatron {
namespace {

using test::from_double;
using test::random_tensor;
using test::to_double;

constexpr int64_t kB = 2, kH = 3, kSq = 13, kSk = 13;

// scores[b, i, j] = Σ_h w[i, b, h] · act(raw[b, h, i, j]) in double.
std::vector<double> scores_reference(const std::vector<double>& raw, const std::vector<double>& w,
                                     bool relu) {
  std::vector<double> out(size_t(kB * kSq * kSk), 0.0);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t h = 0; h < kH; ++h)
      for (int64_t i = 0; i < kSq; ++i)
        for (int64_t j = 0; j < kSk; ++j) {
          const double x = raw[size_t(((b * kH + h) * kSq + i) * kSk + j)];
          out[size_t((b * kSq + i) * kSk + j)] +=
              w[size_t((i * kB + b) * kH + h)] * (relu ? std::max(x, 0.0) : x);
        }
  return out;
}

TEST(SparseAttentionKernels, IndexScoresAndBackwardMatchDoubleLoop) {
  const Tensor raw = random_tensor({kB, kH, kSq, kSk}, DType::F32, 1, -1.0, 1.0);
  const Tensor w = random_tensor({kSq, kB, kH}, DType::F32, 2, -1.0, 1.0);
  const Tensor ds = random_tensor({kB, kSq, kSk}, DType::F32, 3, -1.0, 1.0);
  for (bool relu : {true, false}) {
    SCOPED_TRACE(relu ? "relu" : "identity");
    Tensor scores = Tensor::empty({kB, kSq, kSk}, DType::F32);
    kernels::index_scores(raw, w, relu, scores);
    EXPECT_CLOSE(to_double(scores), scores_reference(to_double(raw), to_double(w), relu), 1e-6,
                 1e-5);
    Tensor draw = Tensor::empty(raw.shape(), DType::F32);
    Tensor dw = Tensor::empty(w.shape(), DType::F32);
    kernels::index_scores_backward(ds, raw, w, relu, draw, dw);
    // d(Σ ds · scores) by central differences (away from the ReLU's kink: |raw| > 1e-3 here).
    const std::vector<double> dsd = to_double(ds), rawd = to_double(raw), wd = to_double(w);
    EXPECT_CLOSE(to_double(draw),
                 test::numeric_grad(
                     [&](const std::vector<double>& x) {
                       return test::dot(dsd, scores_reference(x, wd, relu));
                     },
                     rawd, 1e-7),
                 1e-6, 1e-5);
    EXPECT_CLOSE(to_double(dw),
                 test::numeric_grad(
                     [&](const std::vector<double>& x) {
                       return test::dot(dsd, scores_reference(rawd, x, relu));
                     },
                     wd),
                 1e-5, 1e-5);
  }
}

// The contract's selection in double: per query its k best visible keys (score descending,
// smaller index first on ties).
std::vector<double> mask_reference(const std::vector<double>& s, int64_t b, int64_t sq, int64_t sk,
                                   int64_t k) {
  std::vector<double> mask(s.size(), 1.0);
  for (int64_t r = 0; r < b * sq; ++r) {
    const int64_t visible = std::min(sk, r % sq + (sk - sq) + 1);
    std::vector<int64_t> order(static_cast<size_t>(visible));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
      return s[size_t(r * sk + x)] > s[size_t(r * sk + y)];
    });
    for (int64_t t = 0; t < std::min(k, visible); ++t) mask[size_t(r * sk + order[size_t(t)])] = 0;
  }
  return mask;
}

TEST(SparseAttentionKernels, TopkKeyMaskMatchesSelection) {
  for (int64_t sq : {kSq, int64_t(5)})  // Sq < Sk: the last queries of a longer sequence
    for (int64_t k : {int64_t(1), int64_t(4), int64_t(20)}) {
      SCOPED_TRACE(::testing::Message() << "sq=" << sq << " k=" << k);
      // Few distinct values: many ties, which go to the smaller index.
      std::vector<double> v = to_double(random_tensor({kB, sq, kSk}, DType::F32, 7, -3.0, 3.0));
      for (double& x : v) x = std::round(x);
      const Tensor scores = from_double(v, {kB, sq, kSk}, DType::F32);
      Tensor mask = Tensor::empty({kB, sq, kSk}, DType::U8);
      kernels::topk_key_mask(scores, k, mask);
      std::vector<double> got;
      for (uint8_t m : mask.to_vector<uint8_t>()) got.push_back(m);
      EXPECT_EQ(got, mask_reference(v, kB, sq, kSk, k));
    }
}

// KL(t̂ ‖ softmax(x)) of one row over the valid keys, in double.
double kl_row(const double* x, const double* t, const std::vector<bool>& valid) {
  double mx = -INFINITY, total = 0, z = 0, kl = 0;
  for (size_t j = 0; j < valid.size(); ++j)
    if (valid[j]) {
      mx = std::max(mx, x[j]);
      total += t[j];
    }
  if (mx == -INFINITY) return 0;
  for (size_t j = 0; j < valid.size(); ++j)
    if (valid[j]) z += std::exp(x[j] - mx);
  for (size_t j = 0; j < valid.size(); ++j)
    if (valid[j]) {
      const double tn = t[j] / std::max(total, 1e-10);
      kl += tn * (std::log(std::max(tn, 1e-10)) - (x[j] - mx - std::log(z)));
    }
  return kl;
}

TEST(SparseAttentionKernels, IndexerKlAndGradientMatchDoubleLoop) {
  const int64_t sq = 7, sk = 11;  // the last 7 queries of 11 positions
  const Tensor scores = random_tensor({kB, sq, sk}, DType::F32, 11, -2.0, 2.0);
  std::vector<double> t = to_double(random_tensor({kB, sq, sk}, DType::F32, 12, 0.0, 3.0));
  // Zero target on invisible keys (as the causal attention's) and a zero key in the visible.
  for (int64_t r = 0; r < kB * sq; ++r)
    for (int64_t j = r % sq + (sk - sq) + 1; j < sk; ++j) t[size_t(r * sk + j)] = 0;
  t[2] = 0;
  const Tensor target = from_double(t, {kB, sq, sk}, DType::F32);
  Tensor key_mask = Tensor::empty({kB, sq, sk}, DType::U8);
  kernels::topk_key_mask(scores, 3, key_mask);
  for (bool sparse : {false, true}) {
    SCOPED_TRACE(sparse ? "key mask" : "causal");
    const Tensor mask = sparse ? key_mask : Tensor();
    const std::vector<uint8_t> m = key_mask.to_vector<uint8_t>();
    auto valid_row = [&](int64_t r) {
      std::vector<bool> valid(static_cast<size_t>(sk));
      for (int64_t j = 0; j < sk; ++j)
        valid[size_t(j)] = j <= r % sq + (sk - sq) && !(sparse && m[size_t(r * sk + j)]);
      return valid;
    };
    auto total_kl = [&](const std::vector<double>& x) {
      double sum = 0;
      for (int64_t r = 0; r < kB * sq; ++r)
        sum += kl_row(x.data() + r * sk, t.data() + r * sk, valid_row(r));
      return sum;
    };
    Tensor kl = Tensor::empty({kB, sq}, DType::F32);
    Tensor ds = Tensor::empty({kB, sq, sk}, DType::F32);
    kernels::indexer_kl(scores, target, mask, kl, ds);
    const std::vector<double> x = to_double(scores);
    std::vector<double> expected_kl;
    for (int64_t r = 0; r < kB * sq; ++r)
      expected_kl.push_back(kl_row(x.data() + r * sk, t.data() + r * sk, valid_row(r)));
    EXPECT_CLOSE(to_double(kl), expected_kl, 1e-6, 1e-5);
    EXPECT_CLOSE(to_double(ds), test::numeric_grad(total_kl, x), 1e-5, 1e-4);
  }
}

TEST(SparseAttentionKernels, SoftmaxTakesAPerQueryKeyMask) {
  const int64_t b = 2, h = 3, s = 13;
  const Tensor scores = random_tensor({b, h, s, s}, DType::F32, 21, -3.0, 3.0);
  Tensor mask = Tensor::empty({b, s, s}, DType::U8);
  kernels::topk_key_mask(random_tensor({b, s, s}, DType::F32, 22), 4, mask);
  Tensor probs = Tensor::empty(scores.shape(), DType::F32);
  kernels::scaled_masked_softmax_forward(scores, 0.5f, true, mask, probs);
  const std::vector<double> x = to_double(scores), p = to_double(probs);
  const std::vector<uint8_t> m = mask.to_vector<uint8_t>();
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t i = 0; i < s; ++i) {
        const size_t row = size_t(((bi * h + hi) * s + i) * s), mrow = size_t((bi * s + i) * s);
        double z = 0;
        for (int64_t j = 0; j <= i; ++j)
          if (!m[mrow + size_t(j)]) z += std::exp(0.5 * x[row + size_t(j)]);
        for (int64_t j = 0; j < s; ++j) {
          const bool kept = j <= i && !m[mrow + size_t(j)];
          const double expected = kept ? std::exp(0.5 * x[row + size_t(j)]) / z : 0.0;
          ASSERT_NEAR(p[row + size_t(j)], expected, 1e-6)
              << bi << " " << hi << " " << i << " " << j;
        }
      }
}

}  // namespace
}  // namespace megatron
