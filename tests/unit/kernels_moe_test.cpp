// The mixture-of-experts kernels (kernels/moe_router.h, kernels/moe_sinkhorn.h,
// kernels/sigmoid_gate.h, kernels/moe_permute.h, kernels/grouped_gemm.h) against plain
// double-precision loops on odd sizes: the router's choices and weights for each score function
// (softmax post/pre, sigmoid with a bias, group-limited), the weights of given choices, the
// Sinkhorn choice (and that it balances a skewed router), the shared expert's sigmoid gate, its
// gradients and the router's and the losses' against central finite differences, the slot
// assignment (dropless, capacity with either drop policy, padding), the gathers, and the
// grouped GEMM against a loop over groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernel_test_util.h"
#include "kernels/grouped_gemm.h"
#include "kernels/moe_permute.h"
#include "kernels/moe_router.h"
#include "kernels/moe_sinkhorn.h"
#include "kernels/sigmoid_gate.h"

namespace megatron {
namespace {

using kernels::MoeTopkParams;
using test::from_double;
using test::numeric_grad;
using test::random_tensor;
using test::to_double;
using test::worst_ratio;

// ---- Reference router (double) ----

std::vector<double> softmax(const std::vector<double>& v) {
  const double m = *std::max_element(v.begin(), v.end());
  std::vector<double> out(v.size());
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) sum += (out[i] = std::exp(v[i] - m));
  for (double& x : out) x /= sum;
  return out;
}
double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

// The k largest, decreasing, ties to the lower index; -inf entries are never taken.
std::vector<int> top(const std::vector<double>& v, int64_t k) {
  std::vector<int> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return v[a] > v[b]; });
  order.resize(size_t(k));
  return order;
}

// One row's chosen experts.
std::vector<int> ref_choice(const std::vector<double>& l, const std::vector<double>& bias,
                            const MoeTopkParams& p) {
  const size_t e = l.size();
  std::vector<double> sel(e);
  const std::vector<double> sm = softmax(l);
  for (size_t c = 0; c < e; ++c)
    sel[c] = p.sigmoid       ? sigmoid(l[c]) + (bias.empty() ? 0 : bias[c])
             : p.pre_softmax ? sm[c]
                             : l[c];
  if (p.num_groups > 0) {
    const size_t per = e / size_t(p.num_groups);
    std::vector<double> gs(size_t(p.num_groups));
    for (size_t g = 0; g < gs.size(); ++g) {
      std::vector<double> part(sel.begin() + long(g * per), sel.begin() + long((g + 1) * per));
      for (int i : top(part, p.topk / p.group_topk)) gs[g] += part[size_t(i)];
    }
    const std::vector<int> keep = top(gs, p.group_topk);
    for (size_t c = 0; c < e; ++c)
      if (std::find(keep.begin(), keep.end(), int(c / per)) == keep.end()) sel[c] = -INFINITY;
  }
  return top(sel, p.topk);
}

// One row's weights for given choices (differentiable in l for the finite differences).
std::vector<double> ref_weights(const std::vector<double>& l, const std::vector<int>& idx,
                                const MoeTopkParams& p) {
  std::vector<double> w;
  if (p.sigmoid) {
    double sum = 1e-20;
    for (int i : idx) sum += sigmoid(l[size_t(i)]);
    for (int i : idx) w.push_back(p.topk > 1 ? sigmoid(l[size_t(i)]) / sum : sigmoid(l[size_t(i)]));
  } else if (p.pre_softmax) {
    const std::vector<double> sm = softmax(l);
    for (int i : idx) w.push_back(sm[size_t(i)]);
  } else {
    std::vector<double> chosen;
    for (int i : idx) chosen.push_back(l[size_t(i)]);
    w = softmax(chosen);
  }
  for (double& x : w) x *= p.scaling_factor;
  return w;
}

std::vector<double> row(const std::vector<double>& m, int64_t r, int64_t e) {
  return {m.begin() + r * e, m.begin() + (r + 1) * e};
}

struct RouterCase {
  const char* name;
  int64_t n, e;
  MoeTopkParams p;
  bool bias;
};

class MoeTopk : public ::testing::TestWithParam<RouterCase> {};

TEST_P(MoeTopk, ChoicesWeightsAndGradientMatchDoubleReference) {
  const RouterCase rc = GetParam();
  const MoeTopkParams& p = rc.p;
  const int64_t n = rc.n, e = rc.e, k = p.topk;
  const Tensor logits = random_tensor({n, e}, DType::F32, 11, -2, 2);
  const Tensor bias = rc.bias ? random_tensor({e}, DType::F32, 12, -0.3, 0.3) : Tensor();
  Tensor indices = Tensor::empty({n, k}, DType::I32), probs = Tensor::empty({n, k}, DType::F32);
  kernels::moe_topk_forward(logits, bias, p, indices, probs);
  const std::vector<double> l = to_double(logits);
  const std::vector<double> b = rc.bias ? to_double(bias) : std::vector<double>();
  const std::vector<double> got_idx = to_double(indices), got_p = to_double(probs);
  std::vector<double> want_p;
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<int> idx = ref_choice(row(l, r, e), b, p);
    for (int64_t j = 0; j < k; ++j) ASSERT_EQ(got_idx[size_t(r * k + j)], idx[size_t(j)]) << r;
    for (double w : ref_weights(row(l, r, e), idx, p)) want_p.push_back(w);
  }
  EXPECT_LE(worst_ratio(got_p, want_p, 1e-6, 1e-5), 1.0);
  if (p.num_groups == 0) {  // the same weights for the choices given (groups only choose)
    Tensor given = Tensor::empty({n, k}, DType::F32);
    kernels::moe_topk_weights(logits, indices, p, given);
    EXPECT_LE(worst_ratio(to_double(given), want_p, 1e-6, 1e-5), 1.0);
  }

  // Backward: ∂(Σ dprobs·probs)/∂logits with the choices fixed.
  const Tensor dprobs = random_tensor({n, k}, DType::F32, 13);
  const std::vector<double> dp = to_double(dprobs);
  Tensor dlogits = from_double(std::vector<double>(size_t(n * e), 0.5), {n, e}, DType::F32);
  kernels::moe_topk_backward(dprobs, logits, indices, p, dlogits);
  const auto objective = [&](const std::vector<double>& x) {
    double s = 0;
    for (int64_t r = 0; r < n; ++r) {
      std::vector<int> idx;
      for (int64_t j = 0; j < k; ++j) idx.push_back(int(got_idx[size_t(r * k + j)]));
      const std::vector<double> w = ref_weights(row(x, r, e), idx, p);
      for (int64_t j = 0; j < k; ++j) s += dp[size_t(r * k + j)] * w[size_t(j)];
    }
    return s;
  };
  std::vector<double> want = numeric_grad(objective, l);
  for (double& g : want) g += 0.5;  // accumulated onto the initial 0.5
  EXPECT_LE(worst_ratio(to_double(dlogits), want, 1e-6, 1e-4), 1.0);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, MoeTopk,
    ::testing::Values(RouterCase{"post_softmax", 17, 13, {.topk = 3}, false},
                      RouterCase{"pre_softmax", 11, 7, {.topk = 2, .pre_softmax = true}, false},
                      RouterCase{"sigmoid_bias_scaled",
                                 13,
                                 11,
                                 {.topk = 3, .sigmoid = true, .scaling_factor = 1.7f},
                                 true},
                      RouterCase{"sigmoid_top1", 9, 5, {.topk = 1, .sigmoid = true}, false},
                      RouterCase{
                          "groups", 15, 12, {.topk = 4, .num_groups = 4, .group_topk = 2}, false},
                      RouterCase{"groups_pre_softmax",
                                 7,
                                 9,
                                 {.topk = 3, .pre_softmax = true, .num_groups = 3, .group_topk = 3},
                                 false}),
    [](const auto& info) { return std::string(info.param.name); });

// Sinkhorn (S-BASE) in double: factors d0 (tokens) and d1 (experts) of exp(logits), iterated
// until the experts' factors move by at most 1e-4 on average; returns the normalised scores.
std::vector<double> ref_sinkhorn(const std::vector<double>& l, int64_t n, int64_t e) {
  std::vector<double> cost(l.size()), d0(size_t(n), 1.0), d1(size_t(e), 1.0);
  for (size_t i = 0; i < l.size(); ++i) cost[i] = std::exp(l[i]);
  for (double error = 1e9; error > 1e-4;) {
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t c = 0; c < e; ++c) s += d1[size_t(c)] * cost[size_t(r * e + c)];
      d0[size_t(r)] = 1.0 / double(n) / (s + 1e-8);
    }
    error = 0;
    for (int64_t c = 0; c < e; ++c) {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += d0[size_t(r)] * cost[size_t(r * e + c)];
      const double next = 1.0 / double(e) / (s + 1e-8);
      error += std::fabs(next - d1[size_t(c)]) / double(e);
      d1[size_t(c)] = next;
    }
  }
  std::vector<double> out(l.size());
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < e; ++c)
      out[size_t(r * e + c)] = d0[size_t(r)] * cost[size_t(r * e + c)] * d1[size_t(c)];
  return out;
}

TEST(MoeSinkhorn, ChoiceMatchesDoubleReferenceAndBalancesASkewedRouter) {
  const int64_t n = 29, e = 7, k = 2;
  // Expert 2 scores 2.5 higher for every token: plain top-k sends it every token.
  std::vector<double> l = to_double(random_tensor({n, e}, DType::F32, 41, -1, 1));
  for (int64_t r = 0; r < n; ++r) l[size_t(r * e + 2)] += 2.5;
  const Tensor logits = from_double(l, {n, e}, DType::F32);
  Tensor indices = Tensor::empty({n, k}, DType::I32);
  kernels::moe_sinkhorn_topk(logits, k, indices);
  const std::vector<double> norm = ref_sinkhorn(to_double(logits), n, e);
  const std::vector<double> got = to_double(indices);
  std::vector<int64_t> load(size_t(e), 0);
  for (int64_t r = 0; r < n; ++r) {
    const std::vector<int> want = top(row(norm, r, e), k);
    for (int64_t j = 0; j < k; ++j) {
      ASSERT_EQ(got[size_t(r * k + j)], want[size_t(j)]) << r;
      ++load[size_t(want[size_t(j)])];
    }
  }
  // Balanced: no expert is sent much more than its share N·k/E ≈ 8.3 (plain top-k: 29).
  EXPECT_LE(*std::max_element(load.begin(), load.end()), 12);
}

TEST(SigmoidGate, ForwardAndGradientsMatchDoubleReference) {
  const int64_t n = 13, c = 9;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double tol = dt == DType::F32 ? 1e-6 : 4 * test::kBf16Eps;
    const Tensor y = random_tensor({n, c}, dt, 51),
                 logits = random_tensor({n}, DType::F32, 52, -3, 3);
    const Tensor out0 = random_tensor({n, c}, dt, 53), dout = random_tensor({n, c}, dt, 54);
    const std::vector<double> yv = to_double(y), l = to_double(logits), o = to_double(out0),
                              d = to_double(dout);
    Tensor out = out0.clone();
    kernels::sigmoid_gate_forward(y, logits, out);
    std::vector<double> want(o);
    for (int64_t i = 0; i < n * c; ++i)
      want[size_t(i)] += sigmoid(l[size_t(i / c)]) * yv[size_t(i)];
    EXPECT_LE(worst_ratio(to_double(out), want, tol, tol), 1.0);

    Tensor dy = Tensor::empty({n, c}, dt), dlogits = Tensor::empty({n}, DType::F32);
    kernels::sigmoid_gate_backward(dout, y, logits, dy, dlogits);
    // The objective Σ dout · σ(l)·y, differentiated in y and in l.
    const auto objective = [&](const std::vector<double>& ys, const std::vector<double>& ls) {
      double s = 0;
      for (int64_t i = 0; i < n * c; ++i)
        s += d[size_t(i)] * sigmoid(ls[size_t(i / c)]) * ys[size_t(i)];
      return s;
    };
    const std::vector<double> want_dy =
        numeric_grad([&](const std::vector<double>& x) { return objective(x, l); }, yv);
    const std::vector<double> want_dl =
        numeric_grad([&](const std::vector<double>& x) { return objective(yv, x); }, l);
    EXPECT_LE(worst_ratio(to_double(dy), want_dy, tol, tol), 1.0);
    EXPECT_LE(worst_ratio(to_double(dlogits), want_dl, 1e-6, 1e-5), 1.0);
  }
}

TEST(MoeAuxLoss, StatisticsAndGradientMatchDoubleReference) {
  for (bool sig : {false, true})
    for (int64_t groups : {int64_t(1), int64_t(3)}) {
      SCOPED_TRACE(::testing::Message() << "sigmoid=" << sig << " groups=" << groups);
      const int64_t n = 15, e = 7, k = 2;
      const Tensor logits = random_tensor({n, e}, DType::F32, 21, -2, 2);
      const std::vector<double> l = to_double(logits);
      const auto scores = [&](const std::vector<double>& r) {
        if (!sig) return softmax(r);
        std::vector<double> s(r.size());
        double sum = 1e-20;
        for (size_t c = 0; c < r.size(); ++c) sum += (s[c] = sigmoid(r[c]));
        for (double& x : s) x /= sum;
        return s;
      };
      std::vector<double> counts(static_cast<size_t>(groups * e)),
          sums(static_cast<size_t>(groups * e));
      for (int64_t r = 0; r < n; ++r) {
        const std::vector<double> q = scores(row(l, r, e));
        for (int c : top(q, k)) counts[size_t((r % groups) * e + c)] += 1;
        for (int64_t c = 0; c < e; ++c) sums[size_t((r % groups) * e + c)] += q[size_t(c)];
      }
      Tensor got_counts = Tensor::empty({groups, e}, DType::F32);
      Tensor got_sums = Tensor::empty({groups, e}, DType::F32);
      kernels::moe_aux_loss_stats(logits, k, sig, groups, got_counts, got_sums);
      EXPECT_EQ(to_double(got_counts), counts);
      EXPECT_LE(worst_ratio(to_double(got_sums), sums, 1e-6, 1e-5), 1.0);

      const Tensor weights = random_tensor({groups, e}, DType::F32, 22);
      const std::vector<double> wt = to_double(weights);
      Tensor dlogits = Tensor::zeros({n, e}, DType::F32);
      kernels::moe_aux_loss_backward(logits, weights, sig, dlogits);
      const auto objective = [&](const std::vector<double>& x) {
        double s = 0;
        for (int64_t r = 0; r < n; ++r) {
          const std::vector<double> q = scores(row(x, r, e));
          for (int64_t c = 0; c < e; ++c) s += wt[size_t((r % groups) * e + c)] * q[size_t(c)];
        }
        return s;
      };
      EXPECT_LE(worst_ratio(to_double(dlogits), numeric_grad(objective, l), 1e-6, 1e-4), 1.0);
    }
}

TEST(MoeZLoss, SumAndGradientMatchDoubleReference) {
  const int64_t n = 13, e = 9;
  const Tensor logits = random_tensor({n, e}, DType::F32, 31, -3, 3);
  const std::vector<double> l = to_double(logits);
  const auto objective = [&](const std::vector<double>& x) {
    double s = 0;
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<double> v = row(x, r, e);
      const double m = *std::max_element(v.begin(), v.end());
      double z = 0;
      for (double y : v) z += std::exp(y - m);
      z = m + std::log(z);
      s += z * z;
    }
    return s;
  };
  EXPECT_NEAR(kernels::moe_z_loss_sum(logits), objective(l), 1e-9 * objective(l));
  Tensor dlogits = Tensor::zeros({n, e}, DType::F32);
  kernels::moe_z_loss_backward(logits, 0.25f, dlogits);
  std::vector<double> want = numeric_grad(objective, l);
  for (double& g : want) g *= 0.25;
  EXPECT_LE(worst_ratio(to_double(dlogits), want, 1e-6, 1e-4), 1.0);
}

// ---- Slots and gathers ----

struct SlotCase {
  const char* name;
  int64_t capacity;  // 0: dropless
  bool pad, by_probs;
};

class MoeSlots : public ::testing::TestWithParam<SlotCase> {};

TEST_P(MoeSlots, AssignmentAndGathersMatchLoops) {
  const SlotCase sc = GetParam();
  const int64_t n = 17, k = 3, e = 5, h = 11;
  // Distinct experts per token: a random permutation prefix.
  std::vector<double> ids;
  std::mt19937_64 gen(41);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int> perm(static_cast<size_t>(e));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), gen);
    for (int64_t j = 0; j < k; ++j) ids.push_back(perm[size_t(j)]);
  }
  Tensor idx = Tensor::empty({n, k}, DType::I32);
  for (int64_t i = 0; i < n * k; ++i) idx.data<int32_t>()[i] = int32_t(ids[size_t(i)]);
  const Tensor probs = random_tensor({n, k}, DType::F32, 42, 0, 1);
  const std::vector<double> pr = to_double(probs);

  Tensor counts = Tensor::empty({e}, DType::I64);
  kernels::moe_expert_counts(idx, e, counts);
  // Reference: each expert's pairs in token order, the kept ones, the slots.
  std::vector<std::vector<int>> members(static_cast<size_t>(e));
  for (int64_t i = 0; i < n * k; ++i) members[size_t(ids[size_t(i)])].push_back(int(i));
  std::vector<int64_t> slots = {0};
  std::vector<int> want_source, want_of(size_t(n * k), -1);
  for (int64_t x = 0; x < e; ++x) {
    EXPECT_EQ(counts.data<int64_t>()[x], int64_t(members[size_t(x)].size()));
    std::vector<int> kept = members[size_t(x)];
    const int64_t room = sc.capacity > 0 ? sc.capacity : int64_t(kept.size());
    if (int64_t(kept.size()) > room) {
      if (sc.by_probs)
        std::stable_sort(kept.begin(), kept.end(), [&](int a, int b) { return pr[a] > pr[b]; });
      kept.resize(size_t(room));
      std::sort(kept.begin(), kept.end());
    }
    const int64_t own = sc.pad ? room : int64_t(kept.size());
    for (int64_t j = 0; j < own; ++j) {
      const int pair = j < int64_t(kept.size()) ? kept[size_t(j)] : -1;
      if (pair >= 0) want_of[size_t(pair)] = int(want_source.size());
      want_source.push_back(pair);
    }
    slots.push_back(int64_t(want_source.size()));
  }
  const int64_t m = slots.back();
  Tensor source = Tensor::empty({m}, DType::I32), of = Tensor::empty({n * k}, DType::I32);
  kernels::moe_assign_slots(idx, sc.by_probs ? probs : Tensor(), slots, source, of);
  EXPECT_EQ(source.to_vector<int32_t>(),
            std::vector<int32_t>(want_source.begin(), want_source.end()));
  EXPECT_EQ(of.to_vector<int32_t>(), std::vector<int32_t>(want_of.begin(), want_of.end()));

  const Tensor x = random_tensor({n, h}, DType::F32, 43);
  const std::vector<double> xv = to_double(x);
  Tensor permuted = Tensor::empty({m, h}, DType::F32);
  kernels::moe_permute(x, source, k, permuted);
  std::vector<double> want(size_t(m * h), 0.0);
  for (int64_t r = 0; r < m; ++r)
    if (want_source[size_t(r)] >= 0)
      for (int64_t c = 0; c < h; ++c)
        want[size_t(r * h + c)] = xv[size_t((want_source[size_t(r)] / k) * h + c)];
  EXPECT_EQ(to_double(permuted), want);

  const Tensor y = random_tensor({m, h}, DType::F32, 44);
  const std::vector<double> yv = to_double(y);
  Tensor out = Tensor::empty({n, h}, DType::F32), dx = Tensor::empty({n, h}, DType::F32);
  kernels::moe_unpermute(y, of, probs, out);
  kernels::moe_permute_backward(y, of, k, dx);
  std::vector<double> want_out(size_t(n * h), 0.0), want_dx(size_t(n * h), 0.0);
  for (int64_t i = 0; i < n * k; ++i)
    if (want_of[size_t(i)] >= 0)
      for (int64_t c = 0; c < h; ++c) {
        want_out[size_t((i / k) * h + c)] += pr[size_t(i)] * yv[size_t(want_of[size_t(i)] * h + c)];
        want_dx[size_t((i / k) * h + c)] += yv[size_t(want_of[size_t(i)] * h + c)];
      }
  EXPECT_LE(worst_ratio(to_double(out), want_out, 1e-6, 1e-5), 1.0);
  EXPECT_LE(worst_ratio(to_double(dx), want_dx, 1e-6, 1e-5), 1.0);

  const Tensor dout = random_tensor({n, h}, DType::F32, 45);
  const std::vector<double> dv = to_double(dout);
  Tensor dy = Tensor::empty({m, h}, DType::F32), dprobs = Tensor::empty({n, k}, DType::F32);
  kernels::moe_unpermute_backward(dout, y, source, of, probs, dy, dprobs);
  std::vector<double> want_dy(size_t(m * h), 0.0), want_dp(size_t(n * k), 0.0);
  for (int64_t r = 0; r < m; ++r) {
    const int pair = want_source[size_t(r)];
    if (pair < 0) continue;
    for (int64_t c = 0; c < h; ++c)
      want_dy[size_t(r * h + c)] = pr[size_t(pair)] * dv[size_t((pair / k) * h + c)];
  }
  for (int64_t i = 0; i < n * k; ++i)
    if (want_of[size_t(i)] >= 0)
      for (int64_t c = 0; c < h; ++c)
        want_dp[size_t(i)] += dv[size_t((i / k) * h + c)] * yv[size_t(want_of[size_t(i)] * h + c)];
  EXPECT_LE(worst_ratio(to_double(dy), want_dy, 1e-6, 1e-5), 1.0);
  EXPECT_LE(worst_ratio(to_double(dprobs), want_dp, 1e-5, 1e-5), 1.0);
}

INSTANTIATE_TEST_SUITE_P(Policies, MoeSlots,
                         ::testing::Values(SlotCase{"dropless", 0, false, false},
                                           SlotCase{"drop_position", 8, false, false},
                                           SlotCase{"drop_probs", 8, false, true},
                                           SlotCase{"pad_probs", 12, true, true}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- Grouped GEMM ----

TEST(GroupedGemm, MatchesLoopOverGroupsInBothDtypes) {
  const std::vector<int64_t> rows = {3, 0, 5, 1, 7};
  const int64_t g = 5, m = 16, kdim = 13, n = 9;
  for (DType dtype : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tol = dtype == DType::F32 ? 1e-5 : 2e-2;
    const Tensor x = random_tensor({m, kdim}, dtype, 51);
    const Tensor w = random_tensor({g, n, kdim}, dtype, 52);  // [G, out, in]
    const std::vector<double> xv = to_double(x), wv = to_double(w);
    Tensor y = Tensor::empty({m, n}, dtype);
    kernels::grouped_gemm(x, w, true, rows, y);
    std::vector<double> want(size_t(m * n), 0.0);
    int64_t r0 = 0;
    for (int64_t gi = 0; gi < g; ++gi) {
      for (int64_t r = r0; r < r0 + rows[size_t(gi)]; ++r)
        for (int64_t o = 0; o < n; ++o)
          for (int64_t i = 0; i < kdim; ++i)
            want[size_t(r * n + o)] +=
                xv[size_t(r * kdim + i)] * wv[size_t((gi * n + o) * kdim + i)];
      r0 += rows[size_t(gi)];
    }
    EXPECT_LE(worst_ratio(to_double(y), want, tol, tol), 1.0);

    // The input gradient: dx_g = dy_g · w_g, and the weight gradient dw_g += dy_gᵀ · x_g.
    const Tensor dy = random_tensor({m, n}, dtype, 53);
    const std::vector<double> dyv = to_double(dy);
    Tensor dx = Tensor::empty({m, kdim}, dtype);
    kernels::grouped_gemm(dy, w, false, rows, dx);
    Tensor dw =
        from_double(std::vector<double>(size_t(g * n * kdim), 1.0), {g, n, kdim}, DType::F32);
    kernels::grouped_gemm_weight_grad(dy, x, rows, dw);
    std::vector<double> want_dx(size_t(m * kdim), 0.0), want_dw(size_t(g * n * kdim), 1.0);
    r0 = 0;
    for (int64_t gi = 0; gi < g; ++gi) {
      for (int64_t r = r0; r < r0 + rows[size_t(gi)]; ++r)
        for (int64_t o = 0; o < n; ++o)
          for (int64_t i = 0; i < kdim; ++i) {
            want_dx[size_t(r * kdim + i)] +=
                dyv[size_t(r * n + o)] * wv[size_t((gi * n + o) * kdim + i)];
            want_dw[size_t((gi * n + o) * kdim + i)] +=
                dyv[size_t(r * n + o)] * xv[size_t(r * kdim + i)];
          }
      r0 += rows[size_t(gi)];
    }
    EXPECT_LE(worst_ratio(to_double(dx), want_dx, tol, tol), 1.0);
    EXPECT_LE(worst_ratio(to_double(dw), want_dw, tol, tol), 1.0);
  }
}

TEST(GroupedGemm, RejectsGroupsThatDoNotCoverTheRows) {
  const Tensor x = Tensor::zeros({5, 3}, DType::F32), w = Tensor::zeros({2, 4, 3}, DType::F32);
  Tensor y = Tensor::zeros({5, 4}, DType::F32);
  EXPECT_THROW(kernels::grouped_gemm(x, w, true, {2, 2}, y), Error);
  EXPECT_THROW(kernels::grouped_gemm(x, w, true, {5}, y), Error);
}

}  // namespace
}  // namespace megatron
