// The sampling kernels on the GPU against their CPU twins (which tests/unit/sampling tests check
// against exact references): top-k of logit shards and of candidate lists with empty slots,
// ties and −inf entries (bit for bit), ties of −0 and +0; the Gumbel maximum of shards from a few
// columns to a vocabulary (the same ids and perturbed values); candidate draws with and without
// top-p, complete and incomplete rows (the same ids and incomplete count).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/philox.h"
#include "gpu_test_compare.h"
#include "kernels/sampling.h"

namespace megatron {
namespace {

using gpu_test::bit_equal;
using gpu_test::on_gpu;
using gpu_test::random_tensor;

std::vector<uint64_t> row_keys(int64_t rows) {
  std::vector<uint64_t> keys;
  for (int64_t r = 0; r < rows; ++r) keys.push_back(philox_key({7, uint64_t(r), 3}));
  return keys;
}

// Values in [-3, 3) with repeated values (ties) and a −inf in every row.
Tensor logits_with_ties(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t = random_tensor({rows, cols}, DType::F32, seed, -3.0, 3.0);
  float* v = t.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c + 5 < cols; c += 7) v[r * cols + c + 5] = v[r * cols + c];
    if (cols > 2) v[r * cols + 2] = -std::numeric_limits<float>::infinity();
  }
  return t;
}

TEST(SamplingGpu, TopkOfShardsIsBitIdentical) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  struct Case {
    int64_t rows, cols, valid, offset, k;
  };
  for (const Case c : {Case{3, 37, 37, 0, 5}, Case{4, 1000, 997, 2000, 40},
                       Case{2, 50304, 50257, 0, 1}, Case{5, 9, 9, 18, 16}, Case{3, 40, 0, 0, 4}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << "x" << c.cols << " k=" << c.k);
    const Tensor values = logits_with_ties(c.rows, c.cols, uint64_t(c.cols));
    Tensor cv = Tensor::empty({c.rows, c.k}, DType::F32),
           ci = Tensor::empty({c.rows, c.k}, DType::I32);
    kernels::topk_rows(values, Tensor(), c.offset, c.valid, cv, ci);
    Tensor gv = on_gpu(cv), gi = on_gpu(ci);
    kernels::topk_rows(on_gpu(values), Tensor(), c.offset, c.valid, gv, gi);
    EXPECT_TRUE(bit_equal(gv, cv));
    EXPECT_TRUE(bit_equal(gi, ci));
  }
}

TEST(SamplingGpu, TopkOfCandidateListsWithEmptySlotsIsBitIdentical) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t rows = 4, n = 24, k = 10;
  const Tensor values = logits_with_ties(rows, n, 5);
  std::vector<int32_t> ids(size_t(rows * n));
  for (int64_t i = 0; i < rows * n; ++i) ids[size_t(i)] = (i % 5 == 3) ? -1 : int32_t(i * 13 % 997);
  const Tensor id = Tensor::from_vector(ids, {rows, n});
  Tensor cv = Tensor::empty({rows, k}, DType::F32), ci = Tensor::empty({rows, k}, DType::I32);
  kernels::topk_rows(values, id, 0, n, cv, ci);
  Tensor gv = on_gpu(cv), gi = on_gpu(ci);
  kernels::topk_rows(on_gpu(values), on_gpu(id), 0, n, gv, gi);
  EXPECT_TRUE(bit_equal(gv, cv));
  EXPECT_TRUE(bit_equal(gi, ci));
}

// −0 == +0, so the smaller id ranks first whatever the signs, as on the CPU (the GPU returns
// −0 as +0: an equal value, compared as a value).
TEST(SamplingGpu, TopkTiesOfSignedZerosGoToTheSmallerId) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t n = 6;
  const Tensor values =
      Tensor::from_vector(std::vector<float>{-0.f, 0.f, -0.f, 1.f, 0.f, -0.f}, {1, n});
  Tensor cv = Tensor::empty({1, n}, DType::F32), ci = Tensor::empty({1, n}, DType::I32);
  kernels::topk_rows(values, Tensor(), 0, n, cv, ci);
  Tensor gv = on_gpu(cv), gi = on_gpu(ci);
  kernels::topk_rows(on_gpu(values), Tensor(), 0, n, gv, gi);
  EXPECT_TRUE(bit_equal(gi, ci));
  EXPECT_TRUE(gpu_test::close(gv, cv, 0.0, 0.0));
}

TEST(SamplingGpu, GumbelMaxDrawsTheCpuToken) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  for (const int64_t cols : {1, 7, 300, 4097, 50304}) {
    SCOPED_TRACE(::testing::Message() << "cols=" << cols);
    const int64_t rows = 6, valid = cols > 7 ? cols - 3 : cols;
    const Tensor values = logits_with_ties(rows, cols, uint64_t(cols) + 1);
    Tensor cv = Tensor::empty({rows}, DType::F32), ci = Tensor::empty({rows}, DType::I32);
    for (const uint64_t seed : {1ull, 1234ull}) {
      kernels::gumbel_max_rows(values, 512, valid, seed, row_keys(rows), cv, ci);
      Tensor gv = on_gpu(cv), gi = on_gpu(ci);
      kernels::gumbel_max_rows(on_gpu(values), 512, valid, seed, row_keys(rows), gv, gi);
      EXPECT_TRUE(bit_equal(gi, ci));
      EXPECT_TRUE(bit_equal(gv, cv));
    }
  }
}

TEST(SamplingGpu, CandidateDrawsMatchWithAndWithoutTopP) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU visible";
  const int64_t rows = 8, c = 12;
  // Sorted candidate lists (topk_rows' output) of a 300-token row; row 7 has empty slots.
  const Tensor full = logits_with_ties(rows, 300, 11);
  Tensor values = Tensor::empty({rows, c}, DType::F32), ids = Tensor::empty({rows, c}, DType::I32);
  kernels::topk_rows(full, Tensor(), 0, 300, values, ids);
  for (int64_t j = 9; j < c; ++j) {
    values.data<float>()[7 * c + j] = -std::numeric_limits<float>::infinity();
    ids.data<int32_t>()[7 * c + j] = -1;
  }
  // The full rows' max and Σ exp, in f32 as the sampler's reductions give them.
  Tensor row_max = Tensor::empty({rows}, DType::F32), sum_exp = Tensor::empty({rows}, DType::F32);
  for (int64_t r = 0; r < rows; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < 300; ++i) m = std::max(m, full.data<float>()[r * 300 + i]);
    double s = 0;
    for (int64_t i = 0; i < 300; ++i) s += std::exp(double(full.data<float>()[r * 300 + i]) - m);
    row_max.data<float>()[r] = m;
    sum_exp.data<float>()[r] = float(s);
  }
  for (const float top_p : {0.0f, 0.05f, 0.3f, 1.0f}) {
    SCOPED_TRACE(::testing::Message() << "top_p=" << top_p);
    Tensor co = Tensor::empty({rows}, DType::I32);
    const Tensor undefined;
    const Tensor& mx = top_p > 0 ? row_max : undefined;
    const Tensor& se = top_p > 0 ? sum_exp : undefined;
    const int64_t cpu_incomplete =
        kernels::sample_candidates(values, ids, mx, se, top_p, false, 99, row_keys(rows), co);
    Tensor go = on_gpu(co);
    const int64_t gpu_incomplete = kernels::sample_candidates(
        on_gpu(values), on_gpu(ids), top_p > 0 ? on_gpu(row_max) : undefined,
        top_p > 0 ? on_gpu(sum_exp) : undefined, top_p, false, 99, row_keys(rows), go);
    EXPECT_EQ(gpu_incomplete, cpu_incomplete);
    EXPECT_TRUE(bit_equal(go, co));
    if (top_p == 0.3f) {
      EXPECT_GT(cpu_incomplete, 0) << "the case must cover incomplete rows";
      EXPECT_LT(cpu_incomplete, rows);
    }
  }
}

}  // namespace
}  // namespace megatron
