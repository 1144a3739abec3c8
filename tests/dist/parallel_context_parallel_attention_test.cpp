// Context-parallel attention (parallel/context_parallel_attention.h) at CP 2 and 4, by every
// --cp-comm-type — the ring (p2p), all_gather, a2a (Ulysses) and a2a+p2p at every hierarchical
// split A x P of the CP size — against the fused attention of the whole sequence on one rank
// (kernels/flash_attention.h, itself tested against a double loop): every rank builds the same
// full Q/K/V and output gradient, attends over the whole sequence alone, then runs the CP
// attention on its two chunks (positions enumerated here, not by ContextParallelLayout) and
// checks its rows of the output and the Q/K/V gradients (and the ring's log-sum-exp). Causal;
// GQA; attention dropout drawing the same mask as the whole sequence's.
// On every transport path (transport_test_util.h): host tensors over MPI, and where a GPU is
// visible CUDA tensors staged through MPI and over NCCL (the kernels' CUDA twins, compared with
// the CPU reference to f32 rounding of another summation order).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/philox.h"
#include "distributed/parallel_state.h"
#include "kernels/elementwise.h"
#include "kernels/flash_attention.h"
#include "mpi_test_util.h"
#include "parallel/context_parallel_attention.h"
#include "parallel/random.h"
#include "parallel/ring_attention.h"
#include "transport_test_util.h"

namespace megatron {
namespace {

Tensor random_values(const Shape& shape, uint64_t key) {
  PhiloxStream rng(11, key);
  std::vector<float> v(size_t(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = rng.normal(i);
  return Tensor::from_vector(v, shape);
}

// The rows (dim 0) of `full` that CP rank r of c holds: chunks r and 2c − 1 − r of 2c.
Tensor local_rows(const Tensor& full, int c, int r) {
  const int64_t chunk = full.size(0) / (2 * c);
  Shape shape = full.shape();
  shape[0] = 2 * chunk;
  Tensor local = Tensor::empty(shape, full.dtype());
  const int64_t firsts[2] = {r * chunk, (2 * c - 1 - r) * chunk};
  for (int k = 0; k < 2; ++k) {
    Tensor dst = local.slice(0, k * chunk, (k + 1) * chunk);
    kernels::copy(full.slice(0, firsts[k], firsts[k] + chunk), dst);
  }
  return local;
}

::testing::AssertionResult near(const Tensor& got, const Tensor& want, double tol) {
  const std::vector<float> g = got.clone().to_vector<float>(), w = want.clone().to_vector<float>();
  if (g.size() != w.size()) return ::testing::AssertionFailure() << "sizes differ";
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(double(g[i]) - double(w[i])) / (1.0 + std::abs(double(w[i])));
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  if (worst <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "element " << at << ": " << g[at] << " vs " << w[at]
                                       << " (relative error " << worst << ")";
}

struct Case {
  int64_t seq, batch, groups, queries, head_dim;
  float dropout;
};

// A CP layout and comm type; a2a is the hierarchical split's first level (a2a+p2p only).
struct Layout {
  int cp_size;
  CpCommType type;
  int a2a = 0;
};

void check_cp(test::Path path, const Layout& layout, const Case& k) {
  const int cp_size = layout.cp_size;
  SCOPED_TRACE("CP " + std::to_string(cp_size) + " " + cp_comm_type_name(layout.type) +
               " A=" + std::to_string(layout.a2a) + " s=" + std::to_string(k.seq) +
               " G=" + std::to_string(k.groups) + " q=" + std::to_string(k.queries) +
               " dropout=" + std::to_string(k.dropout));
  const Device device = test::device(path);
  // The CPU is the reference; a GPU sums in another order.
  const double tol = path == test::Path::kHost ? 1.0 : 5.0;
  const ParallelState ps = ParallelState::create(test::communicator(path), 1, 1, RankOrder::kTpDpPp,
                                                 cp_size, layout.a2a);
  const ContextParallelAttention attention(layout.type, ps);
  const int64_t heads = k.groups * k.queries, hd = heads * k.head_dim;
  const Tensor qkv =
      random_values({k.seq, k.batch, k.groups, k.queries + 2, k.head_dim}, 1 + k.groups);
  const Tensor dout = random_values({k.seq, k.batch, hd}, 2 + k.groups);
  const DropoutScope scope{k.dropout > 0, 77, 3, 5};
  const int64_t layer = 2, head_begin = 4;  // a later layer and tensor-parallel rank's heads

  // The whole sequence on one rank.
  std::vector<kernels::MaskRow> rows;
  kernels::FlashAttentionParams whole;
  whole.queries_per_group = k.queries;
  whole.scale = 1.0f / std::sqrt(float(k.head_dim));
  whole.causal = true;
  if (k.dropout > 0) {
    rows = attention_dropout_rows(scope, layer, k.batch, head_begin, heads, k.seq);
    whole.dropout_p = k.dropout;
    whole.seed = scope.seed;
    whole.dropout_rows = &rows;
  }
  Tensor out = Tensor::empty({k.seq, k.batch, hd}, DType::F32);
  Tensor lse = Tensor::empty({k.batch, heads, k.seq}, DType::F32);
  kernels::flash_attention_forward(qkv, whole, out, lse);
  Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32);
  kernels::flash_attention_backward(qkv, out, lse, dout, whole, dqkv);

  // This rank's chunks.
  const int r = ps.cp_rank;
  const int64_t chunk = k.seq / (2 * cp_size);
  const CpAttentionParams p{.layout = ContextParallelLayout::of(k.seq, cp_size, r),
                            .queries_per_group = k.queries,
                            .scale = whole.scale,
                            .dropout_p = k.dropout,
                            .scope = scope,
                            .layer = layer,
                            .head_begin = head_begin};
  const Tensor local_qkv = local_rows(qkv, cp_size, r).to(device);
  Arena arena(device);
  Tensor out_dev = Tensor::empty({2 * chunk, k.batch, hd}, DType::F32, device);
  ContextParallelAttention::Ctx ctx;
  attention.forward(local_qkv, p, out_dev, ctx, arena, arena);
  Tensor dqkv_dev = Tensor::empty(local_qkv.shape(), DType::F32, device);
  attention.backward(local_qkv, out_dev, ctx, local_rows(dout, cp_size, r).to(device), p, dqkv_dev,
                     arena);
  const Tensor local_out = out_dev.to(Device::CPU), local_dqkv = dqkv_dev.to(Device::CPU);

  EXPECT_TRUE(near(local_out, local_rows(out, cp_size, r), tol * 2e-5));
  EXPECT_TRUE(near(local_dqkv, local_rows(dqkv, cp_size, r), tol * 5e-5));
  if (!ctx.lse.defined()) return;  // Ulysses: the log-sum-exp of the head split's sequence
  const Tensor local_lse = ctx.lse.to(Device::CPU);
  // lse [b, H, s] → position-major, so that local_rows picks the chunks' positions.
  Tensor lse_by_position = Tensor::empty({k.seq, k.batch, heads}, DType::F32);
  kernels::copy(lse.transpose(0, 2).transpose(1, 2), lse_by_position);
  const Tensor want_lse = local_rows(lse_by_position, cp_size, r);  // [2C, b, H]
  for (int c = 0; c < 2; ++c) {
    Tensor got = Tensor::empty({chunk, k.batch, heads}, DType::F32);
    kernels::copy(local_lse.select(0, c).transpose(0, 2).transpose(1, 2), got);
    EXPECT_TRUE(near(got, want_lse.slice(0, c * chunk, (c + 1) * chunk), tol * 2e-5))
        << "chunk " << c;
  }
}

class CpAttentionPathTest : public ::testing::TestWithParam<test::Path> {};

TEST_P(CpAttentionPathTest, EqualsTheWholeSequenceOnOneRank) {
  const int n = test::world_size();
  if (n < 2) GTEST_SKIP() << "context-parallel attention needs 2 or more ranks";
  if (const std::string why = test::unavailable(GetParam()); !why.empty()) GTEST_SKIP() << why;
  const std::vector<Case> cases = {
      {24, 2, 2, 1, 8, 0.0f},   // multi-head
      {40, 1, 2, 3, 16, 0.0f},  // grouped-query: 3 query heads per key
      {24, 2, 1, 2, 8, 0.2f},   // dropout: the same mask as the whole sequence's
      {32, 2, 4, 1, 8, 0.0f},   // 4 KV groups: Ulysses over 4 ranks
      {32, 1, 4, 2, 8, 0.2f},   // ... with GQA and dropout
  };
  std::vector<Layout> layouts;
  for (int cp = 2; cp <= n; cp *= 2) {
    if (n % cp != 0) continue;
    for (CpCommType type : {CpCommType::kP2P, CpCommType::kAllGather, CpCommType::kA2A})
      layouts.push_back({cp, type});
    for (int a2a = 1; a2a <= cp; a2a *= 2) layouts.push_back({cp, CpCommType::kA2AP2P, a2a});
  }
  for (const Layout& layout : layouts)
    for (const Case& k : cases) {
      // Ulysses splits the KV groups over its all-to-all group.
      const int a2a = layout.type == CpCommType::kA2A      ? layout.cp_size
                      : layout.type == CpCommType::kA2AP2P ? layout.a2a
                                                           : 1;
      if (k.groups % a2a == 0) check_cp(GetParam(), layout, k);
    }
}

INSTANTIATE_TEST_SUITE_P(Paths, CpAttentionPathTest,
                         ::testing::Values(test::Path::kHost, test::Path::kStaged,
                                           test::Path::kNccl),
                         [](const ::testing::TestParamInfo<test::Path>& info) {
                           return std::string(test::path_name(info.param));
                         });

TEST(RingAttention, WrongLayoutIsRefused) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  const ParallelState ps = ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 2);
  const Tensor qkv = random_values({8, 1, 1, 3, 4}, 9);  // 8 positions: not a local sequence
  CpAttentionParams p;
  p.layout = ContextParallelLayout::of(8, 2, ps.cp_rank);
  Arena arena;
  Tensor out = Tensor::empty({4, 1, 4}, DType::F32), lse = Tensor::empty({2, 1, 1, 2}, DType::F32);
  EXPECT_THROW(ring_attention_forward(*ps.cp, qkv, p, out, lse, arena), Error);
}

TEST(UlyssesAttention, HeadsNotDivisibleByTheGroupAreRefused) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  const ParallelState ps = ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 2);
  const ContextParallelAttention attention(CpCommType::kA2A, ps);
  const Tensor qkv = random_values({4, 1, 1, 3, 4}, 9);  // 1 KV group over 2 ranks
  CpAttentionParams p;
  p.layout = ContextParallelLayout::of(8, 2, ps.cp_rank);
  Arena arena;
  Tensor out = Tensor::empty({4, 1, 4}, DType::F32);
  ContextParallelAttention::Ctx ctx;
  EXPECT_THROW(attention.forward(qkv, p, out, ctx, arena, arena), Error);
}

}  // namespace
}  // namespace megatron
