// The tensor-parallel layers at TP = world size against the dense layer (TP = 1, a
// SoloCommunicator in the same process) built from the same full weights: outputs, input
// gradients and weight-gradient shards, also with sequence parallelism (the input or output a
// sequence shard, the replicated bias's gradient summed over TP as the trainer does). Also the
// mappings against values computed by hand from the rank numbers.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/elementwise.h"
#include "optim/grad_reduction.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/mappings.h"
#include "parallel/row_parallel_linear.h"
#include "parallel/vocab_parallel_cross_entropy.h"
#include "parallel/vocab_parallel_embedding.h"
#include "tp_test_util.h"

namespace megatron {
namespace {

constexpr double kTol = 1e-5;

// Compares every TP gradient shard with the matching slice of the dense gradient.
void expect_grad_shards(const ParameterStore& dense, const ParameterStore& sharded) {
  for (const Parameter& p : sharded.params())
    EXPECT_LE(test::rel_error(p.grad, test::shard_of(p, dense.get(p.spec.name).grad)), kTol)
        << p.spec.name;
}

struct Pair {
  ParallelState tp = test::tp_world_state(), dense = test::dense_state();
  ParameterStore tp_store{tp.tp_rank, tp.tp_size}, dense_store{0, 1};
  ComputeWeights tp_weights{tp_store, DType::F32}, dense_weights{dense_store, DType::F32};
  void allocate(uint64_t seed) {
    tp_store.allocate();
    dense_store.allocate();
    test::copy_dense_into_shards(dense_store, tp_store, seed, 0.5);
    tp_weights.refresh();
    dense_weights.refresh();
  }
};

// This rank's sequence shard (dim 0) of a full [s, ...] tensor, contiguous.
Tensor sequence_shard(const Tensor& full, const ParallelState& tp) {
  const int64_t s = full.size(0) / tp.tp_size;
  return full.slice(0, tp.tp_rank * s, (tp.tp_rank + 1) * s).clone();
}

class ColumnParallelLinearTest : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

TEST_P(ColumnParallelLinearTest, MatchesDenseLayer) {
  const auto [gather_output, skip_bias_add, sequence_parallel] = GetParam();
  const int64_t n = 8, in = 8, out = 12;
  Pair pr;
  ColumnParallelLinearConfig cfg{.name = "fc",
                                 .input_size = in,
                                 .output_size = out,
                                 .gather_output = gather_output,
                                 .skip_bias_add = skip_bias_add};
  ColumnParallelLinear dense(cfg, pr.dense, pr.dense_store, pr.dense_weights);
  cfg.sequence_parallel = sequence_parallel;
  ColumnParallelLinear par(cfg, pr.tp, pr.tp_store, pr.tp_weights);
  pr.allocate(1);
  const int64_t t = pr.tp.tp_size, r = pr.tp.tp_rank, chunk = out / t;
  Arena arena;
  Tensor x = test::uniform_tensor({n, 2, in}, 2);  // [s, b, in]; leading dims are flattened
  ColumnParallelLinear::Ctx dctx, pctx;
  Tensor yd = dense.forward(dctx, x, arena);
  Tensor yp = par.forward(pctx, sequence_parallel ? sequence_shard(x, pr.tp) : x, arena);
  EXPECT_EQ(yp.shape(), (Shape{n, 2, gather_output ? out : chunk}));
  EXPECT_LE(test::rel_error(yp, gather_output ? yd : yd.slice(2, r * chunk, (r + 1) * chunk)),
            kTol);

  Tensor dy = test::uniform_tensor({n, 2, out}, 3);
  Tensor dxd = dense.backward(dctx, dy, arena);
  Tensor dxp = par.backward(
      pctx, gather_output ? dy : dy.slice(2, r * chunk, (r + 1) * chunk).clone(), arena);
  EXPECT_LE(test::rel_error(dxp, sequence_parallel ? sequence_shard(dxd, pr.tp) : dxd), kTol);
  expect_grad_shards(pr.dense_store, pr.tp_store);
  if (skip_bias_add) {  // the caller owns the bias and its gradient
    EXPECT_EQ(kernels::sum_squares(pr.tp_store.get("fc.bias").grad), 0.0);
  }
}

// (gather_output, skip_bias_add, sequence_parallel); gather_output takes no sequence shard.
INSTANTIATE_TEST_SUITE_P(
    AllOptions, ColumnParallelLinearTest,
    ::testing::Values(std::make_tuple(false, false, false), std::make_tuple(false, true, false),
                      std::make_tuple(true, false, false), std::make_tuple(true, true, false),
                      std::make_tuple(false, false, true), std::make_tuple(false, true, true)));

class RowParallelLinearTest : public ::testing::TestWithParam<std::tuple<bool, bool, bool>> {};

TEST_P(RowParallelLinearTest, MatchesDenseLayer) {
  const auto [input_is_parallel, skip_bias_add, sequence_parallel] = GetParam();
  const int64_t n = 8, in = 12, out = 8;
  Pair pr;
  RowParallelLinearConfig cfg{.name = "proj",
                              .input_size = in,
                              .output_size = out,
                              .input_is_parallel = input_is_parallel,
                              .skip_bias_add = skip_bias_add};
  RowParallelLinear dense(cfg, pr.dense, pr.dense_store, pr.dense_weights);
  cfg.sequence_parallel = sequence_parallel;
  RowParallelLinear par(cfg, pr.tp, pr.tp_store, pr.tp_weights);
  pr.allocate(4);
  const int64_t t = pr.tp.tp_size, r = pr.tp.tp_rank, chunk = in / t;
  Arena arena;
  Tensor x = test::uniform_tensor({n, in}, 5);
  Tensor x_local = x.slice(1, r * chunk, (r + 1) * chunk).clone();
  RowParallelLinear::Ctx dctx, pctx;
  Tensor yd = dense.forward(dctx, x, arena);
  Tensor yp = par.forward(pctx, input_is_parallel ? x_local : x, arena);
  EXPECT_LE(test::rel_error(yp, sequence_parallel ? sequence_shard(yd, pr.tp) : yd), kTol);

  Tensor dy = test::uniform_tensor({n, out}, 6);
  Tensor dxd = dense.backward(dctx, dy, arena);
  Tensor dxp = par.backward(pctx, sequence_parallel ? sequence_shard(dy, pr.tp) : dy, arena);
  EXPECT_LE(
      test::rel_error(dxp, input_is_parallel ? dxd.slice(1, r * chunk, (r + 1) * chunk) : dxd),
      kTol);
  // With sequence parallelism the bias gradient covers this rank's rows: the TP sum is whole.
  EXPECT_EQ(pr.tp_store.get("proj.bias").spec.sequence_parallel, sequence_parallel);
  reduce_sequence_parallel_gradients(pr.tp_store, pr.tp);
  expect_grad_shards(pr.dense_store, pr.tp_store);
  if (skip_bias_add) {
    EXPECT_EQ(kernels::sum_squares(pr.tp_store.get("proj.bias").grad), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptions, RowParallelLinearTest,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool(),
                                            ::testing::Bool()));

TEST(VocabParallelEmbeddingTest, MatchesDenseEmbeddingAcrossShardBoundaries) {
  const int64_t vocab = 24, h = 5;
  Pair pr;
  VocabParallelEmbeddingConfig cfg{.name = "emb", .num_embeddings = vocab, .embedding_dim = h};
  VocabParallelEmbedding dense(cfg, pr.dense, pr.dense_store, pr.dense_weights);
  VocabParallelEmbedding par(cfg, pr.tp, pr.tp_store, pr.tp_weights);
  pr.allocate(7);
  // Every shard boundary for TP 1, 2, 4 (shards of 24, 12, 6 rows), some ids twice.
  Tensor ids =
      Tensor::from_vector(std::vector<int32_t>{0, 5, 6, 11, 12, 17, 18, 23, 6, 0, 23, 9}, {3, 4});
  Arena arena;
  VocabParallelEmbedding::Ctx dctx, pctx;
  Tensor yd = dense.forward(dctx, ids, arena);
  Tensor yp = par.forward(pctx, ids, arena);
  EXPECT_EQ(yp.shape(), (Shape{3, 4, h}));
  EXPECT_LE(test::rel_error(yp, yd), kTol);
  Tensor dy = test::uniform_tensor({3, 4, h}, 8);
  dense.backward(dctx, dy);
  par.backward(pctx, dy);
  expect_grad_shards(pr.dense_store, pr.tp_store);
}

// Sequence parallelism (InputEmbedding): the partial lookups reduce-scattered along the
// sequence are exactly this rank's rows of the dense lookup — each id's row comes from one
// rank, the others add zeros — and backward, through the all-gather, gives the same shards.
TEST(VocabParallelEmbeddingTest, ReduceScatteredLookupIsTheDenseShardExactly) {
  const int64_t vocab = 24, h = 5, s = 4, b = 3;
  Pair pr;
  VocabParallelEmbeddingConfig cfg{.name = "emb", .num_embeddings = vocab, .embedding_dim = h};
  VocabParallelEmbedding dense(cfg, pr.dense, pr.dense_store, pr.dense_weights);
  VocabParallelEmbedding par(cfg, pr.tp, pr.tp_store, pr.tp_weights);
  pr.allocate(7);
  Communicator& c = *pr.tp.tp;
  const int64_t t = c.size(), r = c.rank();
  // ids [s, b] (sequence-major) on every shard boundary for TP 1, 2, 4, some twice.
  Tensor ids =
      Tensor::from_vector(std::vector<int32_t>{0, 5, 6, 11, 12, 17, 18, 23, 6, 0, 23, 9}, {s, b});
  Arena arena;
  VocabParallelEmbedding::Ctx dctx, pctx;
  Tensor yd = dense.forward(dctx, ids, arena);  // [s, b, h]
  Tensor yp =
      ReduceScatterToSequenceParallelRegion::forward(c, par.lookup(pctx, ids, arena), arena);
  ASSERT_EQ(yp.shape(), (Shape{s / t, b, h}));
  EXPECT_EQ(yp.to_vector<float>(),
            yd.slice(0, r * (s / t), (r + 1) * (s / t)).clone().to_vector<float>());
  Tensor dy = test::uniform_tensor({s, b, h}, 8);
  dense.backward(dctx, dy);
  Tensor dy_mine = dy.slice(0, r * (s / t), (r + 1) * (s / t)).clone();
  par.backward(pctx, ReduceScatterToSequenceParallelRegion::backward(c, dy_mine, arena));
  expect_grad_shards(pr.dense_store, pr.tp_store);
}

TEST(VocabParallelCrossEntropyTest, MatchesDenseAndNaiveWithHugeLogits) {
  const int64_t vocab_padded = 24, vocab = 21, n = 8;
  ParallelState tp = test::tp_world_state();
  SoloCommunicator solo;
  const int64_t t = tp.tp_size, r = tp.tp_rank, chunk = vocab_padded / t;
  Tensor logits = test::uniform_tensor({n, vocab_padded}, 9, 1000.0);  // ×1000: no overflow
  // Targets on every shard boundary for TP 1, 2, 4, and the last real id.
  Tensor targets = Tensor::from_vector(std::vector<int32_t>{0, 5, 6, 11, 12, 17, 18, 20}, {n});
  Arena arena;
  VocabParallelCrossEntropyCtx dctx, pctx;
  Tensor dense_logits = logits.clone();
  Tensor local_logits = logits.slice(1, r * chunk, (r + 1) * chunk).clone();
  Tensor ld = vocab_parallel_cross_entropy_forward(dctx, solo, dense_logits, targets, vocab, arena);
  Tensor lp =
      vocab_parallel_cross_entropy_forward(pctx, *tp.tp, local_logits, targets, vocab, arena);
  EXPECT_LE(test::rel_error(lp, ld), kTol);
  // Naive double reference over the real columns only.
  const std::vector<float> lg = logits.to_vector<float>(), loss = lp.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < vocab; ++c) mx = std::max(mx, double(lg[i * vocab_padded + c]));
    for (int64_t c = 0; c < vocab; ++c) sum += std::exp(lg[i * vocab_padded + c] - mx);
    const double expect = std::log(sum) + mx - lg[i * vocab_padded + targets.data<int32_t>()[i]];
    EXPECT_NEAR(loss[i], expect, 1e-5 * std::max(1.0, std::abs(expect))) << "token " << i;
  }
  Tensor dloss = test::uniform_tensor({n}, 10);
  Tensor gd = vocab_parallel_cross_entropy_backward(dctx, dloss);
  Tensor gp = vocab_parallel_cross_entropy_backward(pctx, dloss);
  EXPECT_LE(test::rel_error(gp, gd.slice(1, r * chunk, (r + 1) * chunk)), kTol);
  // Padded columns get no gradient (they are never predicted).
  const std::vector<float> gfull = gd.to_vector<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = vocab; c < vocab_padded; ++c) EXPECT_EQ(gfull[i * vocab_padded + c], 0.0f);
}

// x[i][j] = 100·i + j + 1000·tag, [rows, cols].
Tensor pattern(int64_t rows, int64_t cols, int64_t tag) {
  std::vector<float> v(rows * cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) v[i * cols + j] = float(100 * i + j + 1000 * tag);
  return Tensor::from_vector(v, {rows, cols});
}

TEST(MappingsTest, ForwardAndBackwardOfEveryOperator) {
  ParallelState tp = test::tp_world_state();
  Communicator& c = *tp.tp;
  const int64_t t = c.size(), r = c.rank(), rows = 3, chunk = 4;
  const float rank_sum = float(t * (t - 1) / 2);  // Σ ranks
  Arena arena;

  Tensor g = Tensor::from_vector(std::vector<float>{float(r), 1.0f}, {2});
  CopyToTpRegion::backward(c, g);  // f: backward all-reduces
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{rank_sum, float(t)}));
  Tensor x = Tensor::from_vector(std::vector<float>{float(r)}, {1});
  EXPECT_EQ(CopyToTpRegion::forward(x).raw_data(), x.raw_data());  // identity, no copy

  ReduceFromTpRegion::forward(c, x);  // g: forward all-reduces
  EXPECT_EQ(x.to_vector<float>()[0], rank_sum);
  EXPECT_EQ(ReduceFromTpRegion::backward(x).raw_data(), x.raw_data());

  Tensor full = pattern(rows, chunk * t, 0);
  Tensor mine = ScatterToTpRegion::forward(c, full, arena);
  EXPECT_EQ(mine.to_vector<float>(),
            full.slice(1, r * chunk, (r + 1) * chunk).clone().to_vector<float>());
  Tensor back = ScatterToTpRegion::backward(c, pattern(rows, chunk, r), arena);
  Tensor gathered = GatherFromTpRegion::forward(c, pattern(rows, chunk, r), arena);
  for (Tensor* out : {&back, &gathered}) {
    ASSERT_EQ(out->shape(), (Shape{rows, chunk * t}));
    const std::vector<float> v = out->to_vector<float>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < chunk * t; ++j)
        EXPECT_EQ(v[i * chunk * t + j], float(100 * i + j % chunk + 1000 * (j / chunk)));
  }
  Tensor split = GatherFromTpRegion::backward(c, full, arena);
  EXPECT_EQ(split.to_vector<float>(), mine.to_vector<float>());
}

// Sequence parallelism's operators gather and reduce-scatter along dim 0 (the sequence): rank r
// owns rows [r·rows, (r+1)·rows).
TEST(MappingsTest, SequenceParallelOperatorsWorkAlongTheSequence) {
  ParallelState tp = test::tp_world_state();
  Communicator& c = *tp.tp;
  const int64_t t = c.size(), r = c.rank(), rows = 2, cols = 3;
  const float rank_sum = float(t * (t - 1) / 2);
  Arena arena;

  // Rows of every rank in rank order: row i of the result is row i % rows of rank i / rows.
  auto expect_gathered = [&](const Tensor& out) {
    ASSERT_EQ(out.shape(), (Shape{rows * t, cols}));
    const std::vector<float> v = out.to_vector<float>();
    for (int64_t i = 0; i < rows * t; ++i)
      for (int64_t j = 0; j < cols; ++j)
        EXPECT_EQ(v[i * cols + j], float(100 * (i % rows) + j + 1000 * (i / rows)));
  };
  expect_gathered(GatherFromSequenceParallelRegion::forward(c, pattern(rows, cols, r), arena));
  expect_gathered(
      ReduceScatterToSequenceParallelRegion::backward(c, pattern(rows, cols, r), arena));
  expect_gathered(TpRegionInput::forward(c, pattern(rows, cols, r), true, arena));
  // The sum over ranks of this rank's rows: t·(100·i + j) + 1000·Σ ranks, i the global row.
  auto expect_reduced = [&](const Tensor& out) {
    ASSERT_EQ(out.shape(), (Shape{rows, cols}));
    const std::vector<float> v = out.to_vector<float>();
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        EXPECT_EQ(v[i * cols + j], float(t * (100 * (r * rows + i) + j)) + 1000.0f * rank_sum);
  };
  expect_reduced(
      ReduceScatterToSequenceParallelRegion::forward(c, pattern(rows * t, cols, r), arena));
  expect_reduced(GatherFromSequenceParallelRegion::backward(c, pattern(rows * t, cols, r), arena));
  Tensor grad = pattern(rows * t, cols, r);
  expect_reduced(TpRegionInput::backward(c, grad, true, arena));
  // Without sequence parallelism TpRegionInput is f: identity forward, all-reduce backward.
  Tensor x = pattern(rows, cols, r);
  EXPECT_EQ(TpRegionInput::forward(c, x, false, arena).raw_data(), x.raw_data());
  Tensor g = Tensor::from_vector(std::vector<float>{float(r)}, {1});
  EXPECT_EQ(TpRegionInput::backward(c, g, false, arena).to_vector<float>()[0], rank_sum);
}

}  // namespace
}  // namespace megatron
