// Embedding gather / scatter-add over vocab shards against plain loops; repeated ids
// accumulate; ids owned by another shard give zero rows and no gradient.
#include <gtest/gtest.h>

#include "kernel_test_util.h"
#include "kernels/embedding.h"

namespace megatron {
namespace {

using test::random_tensor;
using test::to_double;

class EmbeddingTest : public ::testing::TestWithParam<DType> {};

TEST_P(EmbeddingTest, ShardedForwardAndBackward) {
  const DType dt = GetParam();
  const int64_t v = 23, c = 70, n = 13;  // c > 64: several column blocks in the backward
  const std::vector<int32_t> ids = {0, 5, 22, 5, 11, 12, 5, 0, 21, 13, 5, 7, 22};
  Tensor ids_t = Tensor::from_vector(ids, {n});
  Tensor full = random_tensor({v, c}, dt, 1);
  const auto fd = to_double(full);
  Tensor dout = random_tensor({n, c}, dt, 2);
  const auto gd = to_double(dout);
  // Two shards: rows [0, 12) and [12, 23).
  for (auto [start, end] : {std::pair<int64_t, int64_t>{0, 12}, {12, 23}}) {
    Tensor table = full.slice(0, start, end).clone();
    Tensor out = random_tensor({n, c}, dt, 3);  // garbage that must be overwritten
    kernels::embedding_forward(ids_t, table, start, out);
    std::vector<double> expected(size_t(n * c), 0.0);
    for (int64_t r = 0; r < n; ++r)
      if (ids[size_t(r)] >= start && ids[size_t(r)] < end)
        for (int64_t j = 0; j < c; ++j)
          expected[size_t(r * c + j)] = fd[size_t(ids[size_t(r)] * c + j)];
    EXPECT_EQ(to_double(out), expected) << "shard " << start;

    Tensor dtable = random_tensor({end - start, c}, DType::F32, 4);
    auto dexpected = to_double(dtable);
    for (int64_t r = 0; r < n; ++r)
      if (ids[size_t(r)] >= start && ids[size_t(r)] < end)
        for (int64_t j = 0; j < c; ++j)
          dexpected[size_t((ids[size_t(r)] - start) * c + j)] += gd[size_t(r * c + j)];
    kernels::embedding_backward(dout, ids_t, start, dtable);
    EXPECT_CLOSE(to_double(dtable), dexpected, 1e-6, 1e-6) << "shard " << start;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingTest, ::testing::Values(DType::F32, DType::BF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Embedding, RejectsNegativeIdsAndWrongShapes) {
  Tensor table = Tensor::zeros({4, 3}, DType::F32), out = Tensor::zeros({2, 3}, DType::F32);
  Tensor bad = Tensor::from_vector(std::vector<int32_t>{1, -1}, {2});
  try {
    kernels::embedding_forward(bad, table, 0, out);
    ADD_FAILURE() << "negative id accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("-1"), std::string::npos) << e.message();
  }
  Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 2, 3}, {3});
  EXPECT_THROW(kernels::embedding_forward(ids, table, 0, out), Error);  // out has 2 rows
}

}  // namespace
}  // namespace megatron
