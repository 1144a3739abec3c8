// attention_merge against attention computed whole in double: the keys of each query row are
// split into two disjoint parts, each part's output and log-sum-exp computed in double (rounded
// to f32 as a kernel would store them), merged by the kernel, and compared with the attention
// over all the keys. Rows that one part does not reach (−inf) and rows that neither reaches.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernels/attention_merge.h"
#include "kernels/elementwise.h"

namespace megatron {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Part {
  std::vector<float> out;  // [s, b, H·d]
  std::vector<float> lse;  // [b, H, s]
};

// Attention of every query row over the keys j with part(row, j) true (double), where a row's
// scores are random, its values random: out = Σ_j softmax_j · v_j, lse = log Σ_j exp(score_j).
Part attend(int64_t s, int64_t b, int64_t heads, int64_t d, int64_t keys,
            const std::vector<double>& scores, const std::vector<double>& values,
            const std::function<bool(int64_t row, int64_t j)>& part) {
  Part p{std::vector<float>(size_t(s * b * heads * d), 0.0f),
         std::vector<float>(size_t(b * heads * s), float(kNegInf))};
  for (int64_t n = 0; n < b; ++n)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < s; ++i) {
        const int64_t row = (n * heads + h) * s + i;
        double m = kNegInf;
        for (int64_t j = 0; j < keys; ++j)
          if (part(row, j)) m = std::max(m, scores[size_t(row * keys + j)]);
        if (m == kNegInf) continue;
        double total = 0;
        std::vector<double> acc(size_t(d), 0.0);
        for (int64_t j = 0; j < keys; ++j) {
          if (!part(row, j)) continue;
          const double w = std::exp(scores[size_t(row * keys + j)] - m);
          total += w;
          for (int64_t k = 0; k < d; ++k) acc[size_t(k)] += w * values[size_t(j * d + k)];
        }
        for (int64_t k = 0; k < d; ++k)
          p.out[size_t((i * b + n) * heads * d + h * d + k)] = float(acc[size_t(k)] / total);
        p.lse[size_t(row)] = float(m + std::log(total));
      }
  return p;
}

TEST(AttentionMerge, MergedPartsEqualTheWholeAttention) {
  const int64_t s = 13, b = 2, heads = 3, d = 5, keys = 11, rows = b * heads * s;
  PhiloxStream rng(3, 1);
  std::vector<double> scores(size_t(rows * keys)), values(size_t(keys * d));
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = 3.0 * rng.normal(i);
  for (size_t i = 0; i < values.size(); ++i) values[i] = rng.normal(scores.size() + i);
  // Part a: even keys, except that rows ≡ 1 (mod 5) have none; part b: odd keys, except that
  // rows ≡ 2 (mod 5) have none; rows ≡ 3 (mod 7) are reached by neither part.
  auto in_a = [](int64_t row, int64_t j) { return row % 7 != 3 && row % 5 != 1 && j % 2 == 0; };
  auto in_b = [](int64_t row, int64_t j) { return row % 7 != 3 && row % 5 != 2 && j % 2 == 1; };
  auto in_any = [&](int64_t row, int64_t j) { return in_a(row, j) || in_b(row, j); };
  const Part a = attend(s, b, heads, d, keys, scores, values, in_a);
  const Part bpart = attend(s, b, heads, d, keys, scores, values, in_b);
  const Part whole = attend(s, b, heads, d, keys, scores, values, in_any);

  Tensor out = Tensor::from_vector(a.out, {s, b, heads * d});
  Tensor lse = Tensor::from_vector(a.lse, {b, heads, s});
  kernels::attention_merge(out, lse, Tensor::from_vector(bpart.out, {s, b, heads * d}),
                           Tensor::from_vector(bpart.lse, {b, heads, s}));
  const std::vector<float> got_out = out.to_vector<float>(), got_lse = lse.to_vector<float>();
  for (size_t i = 0; i < got_out.size(); ++i)
    EXPECT_NEAR(got_out[i], whole.out[i], 2e-6) << "out element " << i;
  for (size_t r = 0; r < got_lse.size(); ++r) {
    if (whole.lse[r] == float(kNegInf)) {
      EXPECT_EQ(got_lse[r], float(kNegInf)) << "row " << r;
    } else {
      EXPECT_NEAR(got_lse[r], whole.lse[r], 2e-6 * std::abs(whole.lse[r]) + 1e-6) << "row " << r;
    }
  }
}

TEST(AttentionMerge, Bf16RoundsOnceOnStore) {
  const int64_t s = 3, b = 1, heads = 2, d = 4;
  std::vector<float> oa(size_t(s * b * heads * d)), ob(oa.size());
  for (size_t i = 0; i < oa.size(); ++i) {
    oa[i] = 0.25f * float(i);
    ob[i] = -0.5f * float(i);
  }
  // Equal log-sum-exps: the merge is the mean of the two outputs, exact in bf16 here.
  const std::vector<float> l(size_t(b * heads * s), 0.5f);
  Tensor out = Tensor::empty({s, b, heads * d}, DType::BF16);
  Tensor part = Tensor::empty({s, b, heads * d}, DType::BF16);
  kernels::cast(Tensor::from_vector(oa, {s, b, heads * d}), out);
  kernels::cast(Tensor::from_vector(ob, {s, b, heads * d}), part);
  Tensor lse = Tensor::from_vector(l, {b, heads, s});
  kernels::attention_merge(out, lse, part, Tensor::from_vector(l, {b, heads, s}));
  Tensor got = Tensor::empty({s, b, heads * d}, DType::F32);
  kernels::cast(out, got);
  const std::vector<float> v = got.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], -0.125f * float(i)) << i;
  for (float x : lse.to_vector<float>()) EXPECT_FLOAT_EQ(x, 0.5f + std::log(2.0f));
}

TEST(AttentionMerge, ShapeMismatchNamesTheOperand) {
  Tensor out = Tensor::zeros({4, 1, 6}, DType::F32), lse = Tensor::zeros({1, 2, 4}, DType::F32);
  const Tensor part_lse = Tensor::zeros({1, 2, 3}, DType::F32);
  try {
    kernels::attention_merge(out, lse, Tensor::zeros({4, 1, 6}, DType::F32), part_lse);
    ADD_FAILURE() << "accepted a part_lse of another shape";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("part_lse"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace megatron
