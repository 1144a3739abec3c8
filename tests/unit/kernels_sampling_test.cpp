// The sampling kernels (kernels/sampling.h) against plain loops: top-k of shards and of
// candidate lists (ties to the smaller id, padding and empty slots skipped), the Gumbel-max
// draw against the arg-max of every perturbed value, and Megatron's top-p nucleus rule.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "kernels/sampling.h"

namespace megatron {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

double gumbel(uint64_t seed, uint64_t key, int64_t id) {
  const double u = (double(PhiloxStream(seed, key).u32(uint64_t(id))) + 0.5) * 0x1p-32;
  return -std::log(-std::log(u));
}

std::vector<float> random_values(size_t n, uint64_t seed, int distinct = 0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n);
  // distinct > 0: few distinct values, so that ties are frequent.
  for (float& x : v) x = distinct ? float(int(gen() % uint64_t(distinct))) : dist(gen);
  return v;
}

TEST(TopkRows, ShardMatchesSortedLoop) {
  for (int distinct : {0, 3}) {
    const int64_t b = 3, n = 37, valid = 31, offset = 100;
    const std::vector<float> v = random_values(size_t(b * n), 7 + distinct, distinct);
    for (int64_t k : {1, 5, 31, 40}) {
      Tensor values = Tensor::from_vector(v, {b, n});
      Tensor ov = Tensor::empty({b, k}, DType::F32), oi = Tensor::empty({b, k}, DType::I32);
      kernels::topk_rows(values, Tensor(), offset, valid, ov, oi);
      const auto gv = ov.to_vector<float>();
      const auto gi = oi.to_vector<int32_t>();
      for (int64_t r = 0; r < b; ++r) {
        std::vector<std::pair<float, int32_t>> ref;
        for (int64_t c = 0; c < valid; ++c) ref.emplace_back(v[size_t(r * n + c)], offset + c);
        std::sort(ref.begin(), ref.end(), [](auto& a, auto& c) {
          return a.first > c.first || (a.first == c.first && a.second < c.second);
        });
        for (int64_t j = 0; j < k; ++j) {
          const size_t o = size_t(r * k + j);
          if (j < valid) {
            EXPECT_EQ(gv[o], ref[size_t(j)].first) << r << "," << j;
            EXPECT_EQ(gi[o], ref[size_t(j)].second) << r << "," << j;
          } else {
            EXPECT_EQ(gv[o], kNegInf);
            EXPECT_EQ(gi[o], -1);
          }
        }
      }
    }
  }
}

TEST(TopkRows, CandidatesSkipEmptySlots) {
  Tensor values = Tensor::from_vector(std::vector<float>{1, 5, 5, 2, 9, 0}, {1, 6});
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{4, 8, 3, -1, 7, 1}, {1, 6});
  Tensor ov = Tensor::empty({1, 6}, DType::F32), oi = Tensor::empty({1, 6}, DType::I32);
  kernels::topk_rows(values, ids, 0, 6, ov, oi);
  EXPECT_EQ(oi.to_vector<int32_t>(), (std::vector<int32_t>{7, 3, 8, 4, 1, -1}));
  EXPECT_EQ(ov.to_vector<float>(), (std::vector<float>{9, 5, 5, 1, 0, kNegInf}));
}

TEST(GumbelMaxRows, IsTheArgMaxOfThePerturbedValues) {
  for (int64_t n : {1, 13, 5000, 20011}) {  // > 4096: several chunks
    const int64_t b = 2, valid = n - n / 7, offset = 3 * n;
    std::vector<float> v = random_values(size_t(b * n), uint64_t(n));
    const std::vector<uint64_t> keys = {11, 12};
    Tensor ov = Tensor::empty({b}, DType::F32), oi = Tensor::empty({b}, DType::I32);
    kernels::gumbel_max_rows(Tensor::from_vector(v, {b, n}), offset, valid, 99, keys, ov, oi);
    for (int64_t r = 0; r < b; ++r) {
      float best = kNegInf;
      int32_t best_id = -1;
      for (int64_t c = 0; c < valid; ++c) {
        const float p =
            float(double(v[size_t(r * n + c)]) + gumbel(99, keys[size_t(r)], offset + c));
        if (best_id < 0 || p > best) best = p, best_id = int32_t(offset + c);
      }
      EXPECT_EQ(oi.to_vector<int32_t>()[size_t(r)], best_id) << n;
      EXPECT_EQ(ov.to_vector<float>()[size_t(r)], best) << n;
    }
  }
}

TEST(GumbelMaxRows, EmptyShardGivesNoCandidate) {
  Tensor ov = Tensor::empty({1}, DType::F32), oi = Tensor::empty({1}, DType::I32);
  kernels::gumbel_max_rows(Tensor::zeros({1, 8}, DType::F32), 0, 0, 1, {5}, ov, oi);
  EXPECT_EQ(oi.to_vector<int32_t>()[0], -1);
  EXPECT_EQ(ov.to_vector<float>()[0], kNegInf);
}

// Candidates sorted descending with their full-distribution statistics.
struct Row {
  std::vector<float> values;
  std::vector<int32_t> ids;
  float max = 0, sum = 0;
};

Row sorted_row(const std::vector<float>& logits) {
  Row r;
  std::vector<int32_t> order(logits.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return logits[size_t(a)] > logits[size_t(b)]; });
  r.max = logits[size_t(order[0])];
  for (int32_t i : order) {
    r.values.push_back(logits[size_t(i)]);
    r.ids.push_back(i);
    r.sum += std::exp(logits[size_t(i)] - r.max);
  }
  return r;
}

int64_t draw(const Row& row, int64_t c, float top_p, bool whole, uint64_t key, int32_t* id) {
  Tensor values =
      Tensor::from_vector(std::vector<float>(row.values.begin(), row.values.begin() + c), {1, c});
  Tensor ids =
      Tensor::from_vector(std::vector<int32_t>(row.ids.begin(), row.ids.begin() + c), {1, c});
  Tensor out = Tensor::empty({1}, DType::I32);
  const int64_t incomplete = kernels::sample_candidates(
      values, ids, Tensor::from_vector(std::vector<float>{row.max}, {1}),
      Tensor::from_vector(std::vector<float>{row.sum}, {1}), top_p, whole, 3, {key}, out);
  *id = out.to_vector<int32_t>()[0];
  return incomplete;
}

TEST(SampleCandidates, TopPKeepsMegatronsNucleus) {
  // Probabilities 0.5, 0.25, 0.125, 0.0625, ...: with top_p = 0.7 Megatron keeps the first
  // two (mass before the third is 0.75 > 0.7), with top_p = 0.76 the first three.
  std::vector<float> logits;
  for (int i = 0; i < 10; ++i) logits.push_back(-float(i) * std::log(2.0f));
  const Row row = sorted_row(logits);
  for (auto [top_p, kept] : {std::pair{0.7f, 2}, std::pair{0.76f, 3}, std::pair{0.1f, 1}}) {
    std::vector<int> seen(10, 0);
    for (uint64_t key = 0; key < 400; ++key) {
      int32_t id = -2;
      ASSERT_EQ(draw(row, 10, top_p, false, key, &id), 0);
      ASSERT_GE(id, 0);
      ++seen[size_t(id)];
    }
    for (int i = 0; i < 10; ++i) EXPECT_EQ(seen[size_t(i)] > 0, i < kept) << top_p << " " << i;
  }
}

TEST(SampleCandidates, ReportsAListCutShortOfTheNucleus) {
  std::vector<float> logits(100, 0.0f);  // uniform: 0.01 each
  const Row row = sorted_row(logits);
  int32_t id = 0;
  EXPECT_EQ(draw(row, 50, 0.9f, false, 1, &id), 1);  // 50 candidates hold 0.5 <= 0.9
  EXPECT_EQ(id, -1);
  EXPECT_EQ(draw(row, 50, 0.9f, true, 1, &id), 0);  // ... unless they are the whole vocabulary
  EXPECT_EQ(draw(row, 100, 0.9f, false, 1, &id), 0);
  EXPECT_GE(id, 0);
}

TEST(SampleCandidates, WithoutTopPIsTheGumbelArgMax) {
  const std::vector<float> v = random_values(20, 5);
  const Row row = sorted_row(v);
  for (uint64_t key = 0; key < 20; ++key) {
    Tensor out = Tensor::empty({1}, DType::I32);
    kernels::sample_candidates(Tensor::from_vector(row.values, {1, 20}),
                               Tensor::from_vector(row.ids, {1, 20}), Tensor(), Tensor(), 0.0f,
                               false, 3, {key}, out);
    double best = -1e300;
    int32_t best_id = -1;
    for (int i = 0; i < 20; ++i) {
      const float p = float(double(v[size_t(i)]) + gumbel(3, key, i));
      if (p > best) best = p, best_id = i;
    }
    EXPECT_EQ(out.to_vector<int32_t>()[0], best_id);
  }
}

TEST(SamplingKernels, RejectBadArguments) {
  Tensor ov = Tensor::empty({2, 1}, DType::F32), oi = Tensor::empty({2, 1}, DType::I32);
  EXPECT_THROW(kernels::topk_rows(Tensor::zeros({2, 4}, DType::F32), Tensor(), 0, 5, ov, oi),
               Error);
  Tensor bv = Tensor::empty({2}, DType::F32), bi = Tensor::empty({2}, DType::I32);
  EXPECT_THROW(kernels::gumbel_max_rows(Tensor::zeros({2, 4}, DType::F32), 0, 4, 1, {1}, bv, bi),
               Error);  // one key for two rows
}

}  // namespace
}  // namespace megatron
