// Scaled masked softmax against a double loop (causal, padding, fully masked rows, large
// scores); backward against central differences of the double loop.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/softmax.h"

namespace megatron {
namespace {

using test::from_double;
using test::random_tensor;
using test::to_double;

// probs [B, H, Sq, Sk] in double; pad [B, Sk] (empty: none).
std::vector<double> reference(const std::vector<double>& s, double scale, bool causal,
                              const std::vector<uint8_t>& pad, int64_t b, int64_t h, int64_t sq,
                              int64_t sk) {
  std::vector<double> p(s.size(), 0.0);
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t hi = 0; hi < h; ++hi)
      for (int64_t qi = 0; qi < sq; ++qi) {
        const size_t row = size_t(((bi * h + hi) * sq + qi) * sk);
        auto visible = [&](int64_t j) {
          return !(causal && j > qi + (sk - sq)) && (pad.empty() || !pad[size_t(bi * sk + j)]);
        };
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < sk; ++j)
          if (visible(j)) mx = std::max(mx, scale * s[row + size_t(j)]);
        if (mx == -INFINITY) continue;
        for (int64_t j = 0; j < sk; ++j)
          if (visible(j)) sum += std::exp(scale * s[row + size_t(j)] - mx);
        for (int64_t j = 0; j < sk; ++j)
          if (visible(j)) p[row + size_t(j)] = std::exp(scale * s[row + size_t(j)] - mx) / sum;
      }
  return p;
}

class SoftmaxTest : public ::testing::TestWithParam<DType> {};

TEST_P(SoftmaxTest, ForwardMatchesDoubleLoop) {
  const DType dt = GetParam();
  const int64_t b = 2, h = 3, s = 13;
  const double rtol = dt == DType::BF16 ? test::kBf16Eps : 1e-5;
  // Batch 1 pads every key: its rows must come out all zero, not NaN.
  std::vector<uint8_t> pad(size_t(b * s), 0);
  pad[3] = pad[4] = pad[12] = 1;
  for (int64_t j = 0; j < s; ++j) pad[size_t(s + j)] = 1;
  Tensor pad_t = Tensor::from_vector(pad, {b, s});
  for (bool causal : {false, true})
    for (double range : {3.0, 1000.0}) {  // ×1000: exp must not overflow
      Tensor scores = random_tensor({b, h, s, s}, dt, 1, -range, range);
      Tensor probs = Tensor::empty({b, h, s, s}, dt);
      kernels::scaled_masked_softmax_forward(scores, 0.125f, causal, pad_t, probs);
      EXPECT_CLOSE(to_double(probs), reference(to_double(scores), 0.125, causal, pad, b, h, s, s),
                   1e-6, rtol)
          << "causal=" << causal << " range=" << range;
      kernels::scaled_masked_softmax_forward(scores, 0.125f, causal, Tensor(), probs);
      EXPECT_CLOSE(to_double(probs), reference(to_double(scores), 0.125, causal, {}, b, h, s, s),
                   1e-6, rtol);
    }
}

TEST_P(SoftmaxTest, CausalWithCachedKeys) {
  // Decoding: the 3 newest queries of a 10-key sequence (query i sees keys <= i + 7).
  const DType dt = GetParam();
  Tensor scores = random_tensor({1, 2, 3, 10}, dt, 2), probs = Tensor::empty({1, 2, 3, 10}, dt);
  kernels::scaled_masked_softmax_forward(scores, 1.f, true, Tensor(), probs);
  EXPECT_CLOSE(to_double(probs), reference(to_double(scores), 1.0, true, {}, 1, 2, 3, 10), 1e-6,
               dt == DType::BF16 ? test::kBf16Eps : 1e-5);
}

TEST_P(SoftmaxTest, BackwardMatchesFiniteDifferences) {
  const DType dt = GetParam();
  const int64_t b = 1, h = 2, s = 7;
  const double scale = 0.5;
  std::vector<uint8_t> pad = {0, 0, 1, 0, 0, 0, 1};
  Tensor pad_t = Tensor::from_vector(pad, {b, s});
  Tensor scores = random_tensor({b, h, s, s}, dt, 3, -2.0, 2.0);
  Tensor probs = Tensor::empty({b, h, s, s}, dt);
  kernels::scaled_masked_softmax_forward(scores, float(scale), true, pad_t, probs);
  Tensor dprobs = random_tensor({b, h, s, s}, dt, 4);
  Tensor dscores = Tensor::empty({b, h, s, s}, dt);
  kernels::scaled_masked_softmax_backward(dprobs, probs, float(scale), dscores);
  const auto w = to_double(dprobs);
  auto loss = [&](const std::vector<double>& v) {
    return test::dot(w, reference(v, scale, true, pad, b, h, s, s));
  };
  // bf16: probs and dprobs are rounded inputs to the backward, so allow a few bf16 ulps of
  // the largest gradient terms.
  EXPECT_CLOSE(to_double(dscores), test::numeric_grad(loss, to_double(scores)),
               dt == DType::BF16 ? 4 * test::kBf16Eps : 1e-5,
               dt == DType::BF16 ? test::kBf16Eps : 1e-4);
  // In place (dscores aliases dprobs) gives the same result.
  Tensor inplace = dprobs.clone();
  kernels::scaled_masked_softmax_backward(inplace, probs, float(scale), inplace);
  EXPECT_EQ(to_double(inplace), to_double(dscores));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SoftmaxTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Softmax, RejectsBadMask) {
  Tensor s = Tensor::zeros({2, 1, 3, 3}, DType::F32), p = Tensor::zeros({2, 1, 3, 3}, DType::F32);
  Tensor pad = Tensor::zeros({2, 4}, DType::U8);
  EXPECT_THROW(kernels::scaled_masked_softmax_forward(s, 1.f, false, pad, p), Error);
  Tensor wide = Tensor::zeros({1, 1, 4, 3}, DType::F32),
         pw = Tensor::zeros({1, 1, 4, 3}, DType::F32);
  EXPECT_THROW(kernels::scaled_masked_softmax_forward(wide, 1.f, true, Tensor(), pw), Error);
}

}  // namespace
}  // namespace megatron
