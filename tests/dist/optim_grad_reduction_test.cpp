// Gradient reduction across ranks: the global norm, the per-layer norms and clipping at TP =
// world size against a dense double-precision computation over the full tensors (the per-layer
// norms also over two pipeline stages and over distributed-optimizer shards; the norm, zero count
// and clipping over the dense and expert shards of an expert grid of its own), and the job-wide
// overflow decision when one rank alone sees an inf. (The bucketed DP sum:
// optim_grad_buckets_test.)
#include <cmath>
#include <limits>

#include "distributed/parallel_state.h"
#include "kernels/elementwise.h"
#include "model/stage_range.h"
#include "mpi_test_util.h"
#include "optim/distributed_optimizer.h"
#include "optim/grad_reduction.h"
#include "optim/grad_scaler.h"
#include "optim/layer_grad_norms.h"
#include "parallel/parameter.h"

namespace megatron {
namespace {

const std::vector<ParamSpec> kSpecs = {
    {"column.weight", {8, 5}, 0, true},                                  // split along rows
    {"row.weight", {3, 12}, 1, true},                                    // split along columns
    {"column.bias", {8}, 0, false},       {"row.bias", {3}, -1, false},  // replicated
    {"layernorm.weight", {7}, -1, false},                                // replicated
};

// The gradient of element `i` of the full tensor `name`: a function of the logical position
// only, so every TP layout holds slices of the same full gradient.
double full_grad(const std::string& name, int64_t i) {
  return std::sin(0.37 * double(i) + double(name.size())) * (1.0 + double(name[0] % 5));
}

// A model's names: layer 10 is there to check that indices are read whole, not digit by digit.
const std::vector<ParamSpec> kLayerSpecs = {
    {"embedding.word_embeddings.weight", {8, 4}, 0, true},  // not a layer
    {"layers.0.mlp.dense_h_to_4h.weight", {8, 5}, 0, true},
    {"layers.0.input_layernorm.weight", {7}, -1, false},  // replicated
    {"layers.1.mlp.dense_4h_to_h.weight", {3, 12}, 1, true},
    {"layers.10.self_attention.dense.bias", {3}, -1, false},
    {"layers.10.self_attention.query_key_value.weight", {12, 3}, 0, true},
    {"final_layernorm.weight", {4}, -1, false},  // not a layer
};

void fill_grads(ParameterStore& store) {
  for (Parameter& p : store.params()) {
    float* g = p.grad.data<float>();
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      g[i] = float(full_grad(p.spec.name, full_element_index(p, i)));
  }
}

double dense_norm(const std::vector<ParamSpec>& specs = kSpecs) {
  double sum = 0;
  for (const ParamSpec& s : specs)
    for (int64_t i = 0; i < shape_numel(s.full_shape); ++i) {
      const double g = double(float(full_grad(s.name, i)));
      sum += g * g;
    }
  return std::sqrt(sum);
}

TEST(GradReduction, GlobalNormCountsReplicatedOnceAtEveryTpSize) {
  ParallelState ps = ParallelState::create(test::world(), test::world_size(), 1);
  ParameterStore store(ps.tp_rank, ps.tp_size);
  for (const ParamSpec& s : kSpecs) store.add(s);
  store.allocate();
  fill_grads(store);
  const double norm = global_grad_norm(store, ps);
  EXPECT_NEAR(norm, dense_norm(), 1e-12 * dense_norm());
}

TEST(GradReduction, LayerNormsSplitTheFullGradientByLayerAtEveryTpSize) {
  ParallelState ps = ParallelState::create(test::world(), test::world_size(), 1);
  ParameterStore store(ps.tp_rank, ps.tp_size);
  for (const ParamSpec& s : kLayerSpecs) store.add(s);
  store.allocate();
  fill_grads(store);
  const std::vector<double> norms = layer_grad_norms(store, ps);
  ASSERT_EQ(norms.size(), 11u);
  const double layer0 = dense_norm({kLayerSpecs[1], kLayerSpecs[2]});
  const double layer1 = dense_norm({kLayerSpecs[3]});
  const double layer10 = dense_norm({kLayerSpecs[4], kLayerSpecs[5]});
  EXPECT_NEAR(norms[0], layer0, 1e-12 * layer0);
  EXPECT_NEAR(norms[1], layer1, 1e-12 * layer1);
  EXPECT_NEAR(norms[10], layer10, 1e-12 * layer10);
  for (int layer = 2; layer < 10; ++layer) EXPECT_EQ(norms[size_t(layer)], 0.0) << layer;
}

// The per-layer norms of kLayerSpecs, wherever the pieces are: checked against the dense ones.
void expect_dense_layer_norms(const std::vector<double>& norms) {
  ASSERT_EQ(norms.size(), 11u);
  const double layer0 = dense_norm({kLayerSpecs[1], kLayerSpecs[2]});
  const double layer1 = dense_norm({kLayerSpecs[3]});
  const double layer10 = dense_norm({kLayerSpecs[4], kLayerSpecs[5]});
  EXPECT_NEAR(norms[0], layer0, 1e-12 * layer0);
  EXPECT_NEAR(norms[1], layer1, 1e-12 * layer1);
  EXPECT_NEAR(norms[10], layer10, 1e-12 * layer10);
  for (int layer = 2; layer < 10; ++layer) EXPECT_EQ(norms[size_t(layer)], 0.0) << layer;
}

// Two pipeline stages of a 12-layer model (TP = half the world): the first holds layers 0 and 1
// (and the embedding), the second layer 10 (and the final norm). Every rank gets all 11 norms.
TEST(GradReduction, LayerNormsSumOverPipelineStages) {
  if (test::world_size() % 2 != 0) GTEST_SKIP() << "needs an even world size";
  ParallelState ps = ParallelState::create(test::world(), test::world_size() / 2, 2);
  ParameterStore store(ps.tp_rank, ps.tp_size);
  for (const ParamSpec& s : kLayerSpecs)
    if (pipeline_rank_of_parameter(s.name, {.num_layers = 12, .pipeline_size = 2}) == ps.pp_rank)
      store.add(s);
  store.allocate();
  fill_grads(store);
  expect_dense_layer_norms(layer_grad_norms(store, ps));
}

// The distributed optimizer: each DP rank (TP = PP = 1) holds the reduced gradients of its shard
// of the flat space only; the norms are those of the whole gradient.
TEST(GradReduction, LayerNormsSumOverDistributedOptimizerShards) {
  ParallelState ps = ParallelState::create(test::world(), 1, 1);
  ParameterStore store(ps.tp_rank, ps.tp_size);
  for (const ParamSpec& s : kLayerSpecs) store.add(s);
  store.allocate();
  fill_grads(store);
  const DpShard shard = DpShard::of(store.flat_grads().numel(), ps.dp_size, ps.dp_rank);
  const GradShard grads{store.flat_grads().slice(0, shard.range.begin, shard.range.end),
                        shard.range};
  expect_dense_layer_norms(layer_grad_norms(store, ps, std::span(&grads, 1)));
}

TEST(GradReduction, ClipScalesEveryShardByTheSameCoefficient) {
  ParallelState ps = ParallelState::create(test::world(), test::world_size(), 1);
  ParameterStore store(ps.tp_rank, ps.tp_size);
  for (const ParamSpec& s : kSpecs) store.add(s);
  store.allocate();
  fill_grads(store);
  const double max_norm = dense_norm() / 3.0;
  const double returned = clip_grad_norm(store, ps, max_norm);
  const double after = global_grad_norm(store, ps);
  EXPECT_NEAR(returned, dense_norm(), 1e-12 * dense_norm());
  const double coeff = max_norm / (dense_norm() + 1e-6);
  for (const Parameter& p : store.params()) {
    const float* g = p.grad.data<float>();
    for (int64_t i = 0; i < p.grad.numel(); ++i) {
      const double want = double(float(full_grad(p.spec.name, full_element_index(p, i)))) * coeff;
      EXPECT_NEAR(g[i], want, 1e-6 * std::abs(want) + 1e-7) << p.spec.name << " " << i;
    }
  }
  EXPECT_NEAR(after, max_norm, 1e-5 * max_norm);
  // Below the threshold nothing changes.
  fill_grads(store);
  clip_grad_norm(store, ps, dense_norm() * 2.0);
  EXPECT_NEAR(global_grad_norm(store, ps), dense_norm(), 1e-12 * dense_norm());
}

// The distributed optimizer with the experts on a grid of their own (TP 1, EP 2): the dense
// parameters' gradients sharded over dp × cp (the world), the experts' over edp (world / 2).
// The norm, the zero count and clipping over the two shards count every element of the full
// model once: the same as over the whole gradients, and as the full tensors in double.
TEST(GradReduction, ExpertShardsCountEveryElementOnce) {
  SKIP_UNLESS_WORLD_SIZE_DIVISIBLE_BY(2);
  ParallelState ps = ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 1, 0, 2);
  std::vector<ParamSpec> specs = kSpecs;
  specs.push_back({.name = "experts.fc1.weight", .full_shape = {4, 6}, .expert = true});
  specs.push_back(
      {.name = "experts.fc2.weight", .full_shape = {4, 3, 5}, .partition_dim = 2, .expert = true});
  ParameterStore store(ps.tp_rank, ps.tp_size);
  store.set_expert_grid(ps.ep_rank, ps.ep_size, ps.etp_rank, ps.etp_size);
  for (const ParamSpec& s : specs) store.add(s);
  store.allocate(ps.dp_cp_size, DType::F32, ps.edp->size());
  // Every 7th element of each full tensor has a zero gradient.
  auto grad = [](const std::string& name, int64_t i) {
    return i % 7 == 3 ? 0.0 : double(float(full_grad(name, i)));
  };
  double squares = 0;
  int64_t zeros = 0;
  for (const ParamSpec& s : specs)
    for (int64_t i = 0; i < shape_numel(s.full_shape); ++i) {
      squares += grad(s.name, i) * grad(s.name, i);
      zeros += i % 7 == 3;
    }
  const double want = std::sqrt(squares);
  for (Parameter& p : store.params()) {
    float* g = p.grad.data<float>();
    for (int64_t i = 0; i < p.grad.numel(); ++i)
      g[i] = float(grad(p.spec.name, full_element_index(p, i)));
  }
  const DistributedShards shards = DistributedShards::of(store, ps);
  ASSERT_TRUE(shards.experts.has_value());
  EXPECT_EQ(shards.experts->total, store.expert_part().end - store.expert_part().begin);
  std::vector<GradShard> mine;
  for (const DpShard* s : {&shards.dense, &*shards.experts})
    mine.push_back({store.flat_grads().slice(0, s->range.begin, s->range.end), s->range});
  EXPECT_NEAR(global_grad_norm(store, ps, mine), want, 1e-12 * want);
  EXPECT_NEAR(global_grad_norm(store, ps), want, 1e-12 * want);
  EXPECT_EQ(count_zero_grads(store, ps, mine), zeros);
  EXPECT_EQ(count_zero_grads(store, ps), zeros);
  EXPECT_NEAR(clip_grad_norm(store, ps, want / 3.0, mine), want, 1e-12 * want);
  EXPECT_NEAR(global_grad_norm(store, ps, mine), want / 3.0, 1e-5 * want);
}

TEST(GradReduction, OverflowOnOneRankSkipsOnEveryRank) {
  auto world = test::world();
  const int last = world->size() - 1;
  Tensor grads = Tensor::zeros({16}, DType::F32);
  const bool clean = found_overflow_anywhere(grads, *world, true);
  if (world->rank() == last) grads.data<float>()[3] = std::numeric_limits<float>::infinity();
  const bool inf = found_overflow_anywhere(grads, *world, false);
  grads.data<float>()[3] = 0.0f;
  if (world->rank() == last) grads.data<float>()[9] = std::nanf("");
  const bool nan = found_overflow_anywhere(grads, *world, false);
  grads.data<float>()[9] = 0.0f;
  if (world->rank() == 0) grads.data<float>()[0] = 70000.0f;  // beyond f16's 65504
  const bool beyond_f16 = found_overflow_anywhere(grads, *world, true);
  const bool beyond_f16_unchecked = found_overflow_anywhere(grads, *world, false);
  EXPECT_FALSE(clean);
  EXPECT_TRUE(inf);
  EXPECT_TRUE(nan);
  EXPECT_TRUE(beyond_f16);
  EXPECT_FALSE(beyond_f16_unchecked);

  // Fed the same decision, every rank's scaler ends in the same state.
  GradScaler scaler({true, 1024, 1, 1000, 1});
  scaler.update(inf);
  const double scale = scaler.scale();
  const double max_scale = world->all_reduce_scalar(scale, ReduceOp::MAX);
  EXPECT_EQ(scale, 512);
  EXPECT_EQ(max_scale, scale);
}

}  // namespace
}  // namespace megatron
