// ExpertTokenExchange under mpirun against the same routing computed in one process: every
// rank of a tp_ep group builds the tokens_by_expert of every rank of its group from the rank
// numbers alone (source g routes c(g, e) rows to expert e, row i of them holding
// value(g, e, i, col)), so each rank knows which rows its local experts must receive, in which
// order (the header's contract), and what combine must return. The experts are stood in for by
// exact integer arithmetic: etp rank t returns (t + 1)·(e + 1)·row for a row of expert e, so
// the combined row must be (e + 1)·et(et + 1)/2·row, which only a reduction over the etp group
// in the right places gives. The backwards are checked as adjoints: summed over the ranks,
// <dispatch(x), y> = <x, dispatch_backward(y)> and <combine(y), z> = <y, combine_backward(z)>.
// With EtpTokens::kShared each etp rank exchanges within its ep group alone and combine returns
// its partial sums unreduced; the test gives the etp ranks different rows, so that rows crossing
// between them would show.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "mpi_test_util.h"
#include "parallel/expert_token_exchange.h"

namespace megatron {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kHidden = 3;

int64_t rows_of(int64_t source, int64_t expert) {
  return (source * 3 + expert * 5 + 1) % 4;  // 0..3 rows, some experts empty
}

// Small integers: exact in f32 and in bf16 (|v| < 256) alike.
float value(int64_t source, int64_t expert, int64_t row, int64_t col) {
  return float((source * 37 + expert * 11 + row * 5 + col * 3) % 23 - 11);
}

// Source g's tokens_by_expert as host values, and its tokens_per_expert.
std::vector<float> source_rows(int64_t source, int64_t num_experts, std::vector<int64_t>& counts) {
  std::vector<float> rows;
  counts.clear();
  for (int64_t e = 0; e < num_experts; ++e) {
    counts.push_back(rows_of(source, e));
    for (int64_t i = 0; i < rows_of(source, e); ++i)
      for (int64_t c = 0; c < kHidden; ++c) rows.push_back(value(source, e, i, c));
  }
  return rows;
}

double dot(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += double(x[i]) * double(y[i]);
  return s;
}

Tensor host_tensor(const std::vector<float>& values, DType dtype) {
  const Tensor f32 = Tensor::from_vector(values, {int64_t(values.size()) / kHidden, kHidden});
  if (dtype == DType::F32) return f32;
  Tensor out = Tensor::empty(f32.shape(), dtype);
  for (int64_t i = 0; i < f32.numel(); ++i) out.data<bf16>()[i] = bf16(f32.data<float>()[i]);
  return out;
}

std::vector<float> as_floats(const Tensor& t) {
  if (t.dtype() == DType::F32) return t.to_vector<float>();
  std::vector<float> out;
  for (bf16 v : t.to_vector<bf16>()) out.push_back(float(v));
  return out;
}

void check_exchange(int tp, int ep, int etp, int64_t num_experts, TokenDispatcher kind, DType dtype,
                    EtpTokens etp_tokens = EtpTokens::kOwn) {
  const bool shared = etp_tokens == EtpTokens::kShared;
  SCOPED_TRACE(::testing::Message()
               << "tp=" << tp << " ep=" << ep << " etp=" << etp << " experts=" << num_experts
               << (kind == TokenDispatcher::kAllToAll ? " alltoall" : " allgather") << " "
               << dtype_name(dtype) << (shared ? " shared" : ""));
  const ParallelState ps =
      ParallelState::create(test::world(), tp, 1, RankOrder::kTpDpPp, 1, 0, ep, etp);
  const ExpertTokenExchange exchange(ps, num_experts, kind, etp_tokens);
  Arena arena;
  // Within the exchange's group, rank g = ep_rank · et + etp_rank (kShared: et counts as 1).
  // Sources differ between the replicas of the group too, so no rows can cross them.
  const int64_t et = shared ? 1 : etp, group = ep * et;
  const int64_t me = ps.ep_rank * et + (shared ? 0 : ps.etp_rank);
  auto source = [&](int64_t g) {
    return (ps.edp_rank * etp + (shared ? ps.etp_rank : 0)) * ep * etp + g;
  };
  std::vector<int64_t> counts;
  const std::vector<float> mine = source_rows(source(me), num_experts, counts);
  const Tensor tokens = host_tensor(mine, dtype);

  ExpertExchangeCtx ctx;
  const LocalTokens local = exchange.dispatch(ctx, tokens, counts, arena);

  // The rows each local expert must receive, in the contract's source order.
  const int64_t L = num_experts / ep, first = ps.ep_rank * L;
  std::vector<int64_t> sources_in_order;
  if (kind == TokenDispatcher::kAllToAll) {
    for (int64_t t = 0; t < et; ++t)
      for (int64_t y = 0; y < ep; ++y) sources_in_order.push_back(y * et + t);
  } else {
    for (int64_t g = 0; g < group; ++g) sources_in_order.push_back(g);
  }
  std::vector<float> expected_local, expert_out, expected_combined;
  std::vector<int64_t> expected_counts;
  for (int64_t j = 0; j < L; ++j) {
    int64_t n = 0;
    for (int64_t g : sources_in_order) {
      for (int64_t i = 0; i < rows_of(source(g), first + j); ++i)
        for (int64_t c = 0; c < kHidden; ++c) {
          const float v = value(source(g), first + j, i, c);
          expected_local.push_back(v);
          expert_out.push_back(float((ps.etp_rank + 1) * (first + j + 1)) * v);
        }
      n += rows_of(source(g), first + j);
    }
    expected_counts.push_back(n);
  }
  for (int64_t e = 0; e < num_experts; ++e)
    for (int64_t i = 0; i < rows_of(source(me), e); ++i)
      for (int64_t c = 0; c < kHidden; ++c)
        expected_combined.push_back(
            float((e + 1) * (shared ? ps.etp_rank + 1 : et * (et + 1) / 2)) *
            value(source(me), e, i, c));
  EXPECT_EQ(local.tokens_per_expert, expected_counts);
  EXPECT_EQ(as_floats(local.tokens), expected_local);

  const Tensor combined = exchange.combine(ctx, host_tensor(expert_out, dtype), arena);
  EXPECT_EQ(combined.dtype(), dtype);
  EXPECT_EQ(as_floats(combined), expected_combined);

  // Adjoints, in f32: y on the local side and z on the token side are arbitrary.
  if (dtype != DType::F32) return;
  std::vector<float> y_values, z_values;
  for (int64_t i = 0; i < local.tokens.numel(); ++i)
    y_values.push_back(float((i * 7 + ps.rank * 3) % 9) - 4.0f);
  for (int64_t i = 0; i < tokens.numel(); ++i)
    z_values.push_back(float((i * 5 + ps.rank * 11) % 7) - 3.0f);
  const Tensor y = Tensor::from_vector(y_values, local.tokens.shape());
  const Tensor z = Tensor::from_vector(z_values, tokens.shape());
  const Tensor dispatch_t_y = exchange.dispatch_backward(ctx, y, arena);
  const Tensor combine_y = exchange.combine(ctx, y, arena);
  const Tensor combine_t_z = exchange.combine_backward(ctx, z, arena);
  Communicator& exchanged_over = shared ? *ps.ep : *ps.tp_ep;
  const double lhs_dispatch = exchanged_over.all_reduce_scalar(dot(local.tokens, y));
  const double rhs_dispatch = exchanged_over.all_reduce_scalar(dot(tokens, dispatch_t_y));
  const double lhs_combine = exchanged_over.all_reduce_scalar(dot(combine_y, z));
  const double rhs_combine = exchanged_over.all_reduce_scalar(dot(y, combine_t_z));
  EXPECT_EQ(lhs_dispatch, rhs_dispatch);  // small integers: exact
  EXPECT_EQ(lhs_combine, rhs_combine);
  // combine_backward is dispatch's exchange: z takes the same way as the tokens.
  EXPECT_EQ(combine_t_z.shape(), local.tokens.shape());
}

// Every expert grid of this world size with TP 1 (the expert grid then owns the whole
// decomposition) and, at np 4, TP 2 under it; both dispatchers; 4 and 8 experts.
TEST(ExpertTokenExchangeTest, MatchesTheSingleProcessRouting) {
  const int n = test::world_size();
  for (int tp : {1, 2}) {
    if (n % tp != 0) continue;
    for (int ep = 1; ep <= n; ep *= 2)
      for (int etp = 1; ep * etp <= n; etp *= 2) {
        if (n % (ep * etp) != 0) continue;
        for (int64_t experts : {int64_t(4), int64_t(8)}) {
          if (experts % ep != 0) continue;
          for (TokenDispatcher kind : {TokenDispatcher::kAllToAll, TokenDispatcher::kAllGather}) {
            check_exchange(tp, ep, etp, experts, kind, DType::F32);
            if (etp > 1) check_exchange(tp, ep, etp, experts, kind, DType::F32, EtpTokens::kShared);
          }
        }
      }
  }
}

// bf16 tokens move as 16-bit words and are summed in f32, rounded once.
TEST(ExpertTokenExchangeTest, Bf16TokensTakeTheSameWay) {
  const int n = test::world_size();
  const int ep = n >= 2 ? 2 : 1, etp = n / ep;
  for (TokenDispatcher kind : {TokenDispatcher::kAllToAll, TokenDispatcher::kAllGather})
    check_exchange(1, ep, etp, 4, kind, DType::BF16);
}

TEST(ExpertTokenExchangeTest, DispatcherNamesAreMegatrons) {
  EXPECT_EQ(token_dispatcher_from_name("alltoall"), TokenDispatcher::kAllToAll);
  EXPECT_EQ(token_dispatcher_from_name("allgather"), TokenDispatcher::kAllGather);
  // flex's DeepEP / HybridEP are GPU libraries moving the same tokens: alltoall's exchange.
  EXPECT_EQ(token_dispatcher_from_name("flex"), TokenDispatcher::kAllToAll);
  EXPECT_THROW(token_dispatcher_from_name("alltoal"), Error);
}

TEST(ExpertTokenExchangeTest, ExpertsMustSplitOverTheExpertParallelRanks) {
  SKIP_UNLESS_WORLD_SIZE_AT_LEAST(2);
  const ParallelState ps = ParallelState::create(test::world(), 1, 1, RankOrder::kTpDpPp, 1, 0, 2);
  try {
    ExpertTokenExchange exchange(ps, 3, TokenDispatcher::kAllToAll);
    ADD_FAILURE() << "accepted 3 experts over 2 ranks";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("--num-experts 3 is not divisible"));
  }
}

}  // namespace
}  // namespace megatron
