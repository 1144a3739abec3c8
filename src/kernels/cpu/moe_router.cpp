// The MoE router's kernels on CPU (contract: kernels/moe_router.h, checked by
// kernels/moe_router.cpp): one token's row of E experts per iteration (OpenMP over rows), in
// double precision inside a row, for f32 or f64 logits (T). Sums over tokens run in token order
// (deterministic).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

double sigmoid(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// Calls fn(T{}) with T = float or double, the logits' dtype (kernels/moe_router.cpp checked it).
template <typename Fn>
void with_logits(const Tensor& logits, Fn&& fn) {
  dispatch_dtype<float, double>(logits.dtype(), "moe router logits", std::forward<Fn>(fn));
}

// softmax of row[0..e) into out.
template <typename T>
void softmax_row(const T* row, int64_t e, double* out) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < e; ++j) m = std::max(m, double(row[j]));
  double sum = 0;
  for (int64_t j = 0; j < e; ++j) sum += (out[j] = std::exp(double(row[j]) - m));
  for (int64_t j = 0; j < e; ++j) out[j] /= sum;
}

// The k largest of score[0..e) restricted to allowed (null: all), in decreasing order, ties to
// the lower index.
void top_k(const double* score, int64_t e, int64_t k, const std::vector<char>* allowed,
           int32_t* out) {
  std::vector<char> taken(size_t(e), 0);
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t c = 0; c < e; ++c) {
      if (taken[size_t(c)] || (allowed && !(*allowed)[size_t(c)])) continue;
      if (best < 0 || score[c] > score[best]) best = c;
    }
    taken[size_t(best)] = 1;
    out[j] = int32_t(best);
  }
}

// The experts a token may choose under group-limited routing: the group_topk groups of the
// largest sums of their top (k / group_topk) scores.
std::vector<char> allowed_groups(const double* score, int64_t e, const MoeTopkParams& p) {
  const int64_t per_group = e / p.num_groups, m = p.topk / p.group_topk;
  std::vector<double> group_score(size_t(p.num_groups));
  std::vector<int32_t> best(static_cast<size_t>(m));
  for (int64_t g = 0; g < p.num_groups; ++g) {
    top_k(score + g * per_group, per_group, m, nullptr, best.data());
    double s = 0;
    for (int32_t b : best) s += score[g * per_group + b];
    group_score[size_t(g)] = s;
  }
  std::vector<int32_t> groups(size_t(p.group_topk));
  top_k(group_score.data(), p.num_groups, p.group_topk, nullptr, groups.data());
  std::vector<char> allowed(size_t(e), 0);
  for (int32_t g : groups)
    std::fill(allowed.begin() + g * per_group, allowed.begin() + (g + 1) * per_group, 1);
  return allowed;
}

// One token's routing: the chosen experts and, in `act`, the row's activation (softmax
// probabilities with pre_softmax, sigmoids with sigmoid; unused otherwise).
template <typename T>
void route_row(const T* logit, const float* bias, int64_t e, const MoeTopkParams& p, double* act,
               double* select, int32_t* idx) {
  if (p.sigmoid) {
    for (int64_t c = 0; c < e; ++c) {
      act[c] = sigmoid(logit[c]);
      select[c] = act[c] + (bias ? double(bias[c]) : 0.0);
    }
  } else if (p.pre_softmax) {
    softmax_row(logit, e, act);
    std::copy(act, act + e, select);
  } else {
    for (int64_t c = 0; c < e; ++c) select[c] = logit[c];
  }
  if (p.num_groups > 0) {
    const std::vector<char> allowed = allowed_groups(select, e, p);
    top_k(select, e, p.topk, &allowed, idx);
  } else {
    top_k(select, e, p.topk, nullptr, idx);
  }
}

// The chosen weights before the scaling factor, into w[0..k).
template <typename T>
void row_weights(const T* logit, const double* act, const int32_t* idx, const MoeTopkParams& p,
                 double* w) {
  const int64_t k = p.topk;
  if (p.sigmoid) {
    double sum = 1e-20;
    for (int64_t j = 0; j < k; ++j) sum += act[idx[j]];
    for (int64_t j = 0; j < k; ++j) w[j] = k > 1 ? act[idx[j]] / sum : act[idx[j]];
  } else if (p.pre_softmax) {
    for (int64_t j = 0; j < k; ++j) w[j] = act[idx[j]];
  } else {
    double m = -std::numeric_limits<double>::infinity(), sum = 0;
    for (int64_t j = 0; j < k; ++j) m = std::max(m, double(logit[idx[j]]));
    for (int64_t j = 0; j < k; ++j) sum += (w[j] = std::exp(double(logit[idx[j]]) - m));
    for (int64_t j = 0; j < k; ++j) w[j] /= sum;
  }
}

// The load-balancing loss's scores q of one row (softmax, or normalised sigmoids) and, with
// sigmoid, the sigmoids and their sum.
template <typename T>
void aux_scores(const T* logit, int64_t e, bool sig, double* q, double* s, double* sum) {
  if (!sig) {
    softmax_row(logit, e, q);
    return;
  }
  *sum = 1e-20;
  for (int64_t c = 0; c < e; ++c) *sum += (s[c] = sigmoid(logit[c]));
  for (int64_t c = 0; c < e; ++c) q[c] = s[c] / *sum;
}

template <typename T>
double logsumexp_row(const T* row, int64_t e) {
  double m = -std::numeric_limits<double>::infinity(), sum = 0;
  for (int64_t j = 0; j < e; ++j) m = std::max(m, double(row[j]));
  for (int64_t j = 0; j < e; ++j) sum += std::exp(double(row[j]) - m);
  return m + std::log(sum);
}

template <typename T>
void topk_forward(const Tensor& logits, const Tensor& expert_bias, const MoeTopkParams& p,
                  Tensor& indices, Tensor& probs) {
  const int64_t n = logits.size(0), e = logits.size(1), k = p.topk;
  const T* l = logits.data<T>();
  const float* bias = expert_bias.defined() ? expert_bias.data<float>() : nullptr;
  int32_t* idx = indices.data<int32_t>();
  float* pr = probs.data<float>();
#pragma omp parallel
  {
    std::vector<double> act(static_cast<size_t>(e)), select(static_cast<size_t>(e)),
        w(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      route_row(l + r * e, bias, e, p, act.data(), select.data(), idx + r * k);
      row_weights(l + r * e, act.data(), idx + r * k, p, w.data());
      for (int64_t j = 0; j < k; ++j) pr[r * k + j] = float(w[size_t(j)] * p.scaling_factor);
    }
  }
}

template <typename T>
void topk_weights(const Tensor& logits, const Tensor& indices, const MoeTopkParams& p,
                  Tensor& probs) {
  const int64_t n = logits.size(0), e = logits.size(1), k = p.topk;
  const T* l = logits.data<T>();
  const int32_t* idx = indices.data<int32_t>();
  float* pr = probs.data<float>();
#pragma omp parallel
  {
    std::vector<double> act(static_cast<size_t>(e)), w(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const T* row = l + r * e;
      if (p.sigmoid)
        for (int64_t c = 0; c < e; ++c) act[size_t(c)] = sigmoid(row[c]);
      else if (p.pre_softmax)
        softmax_row(row, e, act.data());
      row_weights(row, act.data(), idx + r * k, p, w.data());
      for (int64_t j = 0; j < k; ++j) pr[r * k + j] = float(w[size_t(j)] * p.scaling_factor);
    }
  }
}

template <typename T>
void topk_backward(const Tensor& dprobs, const Tensor& logits, const Tensor& indices,
                   const MoeTopkParams& p, Tensor& dlogits) {
  const int64_t n = logits.size(0), e = logits.size(1), k = p.topk;
  const T* l = logits.data<T>();
  const float* dp = dprobs.data<float>();
  const int32_t* idx = indices.data<int32_t>();
  T* dl = dlogits.data<T>();
#pragma omp parallel
  {
    std::vector<double> act(static_cast<size_t>(e)), w(static_cast<size_t>(k)),
        g(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const T* row = l + r * e;
      const int32_t* ix = idx + r * k;
      T* d = dl + r * e;
      for (int64_t j = 0; j < k; ++j) g[size_t(j)] = double(dp[r * k + j]) * p.scaling_factor;
      if (p.sigmoid) {
        for (int64_t j = 0; j < k; ++j) act[size_t(ix[j])] = sigmoid(row[ix[j]]);
        // w_j = s_j / S: ∂/∂s_i = (g_i − Σ_j g_j w_j) / S; s' = s(1 − s).
        double sum = 1e-20, gw = 0;
        for (int64_t j = 0; j < k; ++j) sum += act[size_t(ix[j])];
        for (int64_t j = 0; j < k; ++j) gw += g[size_t(j)] * act[size_t(ix[j])] / sum;
        for (int64_t j = 0; j < k; ++j) {
          const double s = act[size_t(ix[j])];
          const double ds = k > 1 ? (g[size_t(j)] - gw) / sum : g[size_t(j)];
          d[ix[j]] += T(ds * s * (1 - s));
        }
      } else if (p.pre_softmax) {
        softmax_row(row, e, act.data());
        double gs = 0;
        for (int64_t j = 0; j < k; ++j) gs += g[size_t(j)] * act[size_t(ix[j])];
        std::vector<double> sparse(size_t(e), 0.0);
        for (int64_t j = 0; j < k; ++j) sparse[size_t(ix[j])] = g[size_t(j)];
        for (int64_t c = 0; c < e; ++c) d[c] += T(act[size_t(c)] * (sparse[size_t(c)] - gs));
      } else {
        row_weights<T>(row, nullptr, ix, p, w.data());
        double gw = 0;
        for (int64_t j = 0; j < k; ++j) gw += g[size_t(j)] * w[size_t(j)];
        for (int64_t j = 0; j < k; ++j) d[ix[j]] += T(w[size_t(j)] * (g[size_t(j)] - gw));
      }
    }
  }
}

template <typename T>
void aux_loss_stats(const Tensor& logits, int64_t topk, bool sigmoid, int64_t groups,
                    Tensor& counts, Tensor& score_sums) {
  const int64_t n = logits.size(0), e = logits.size(1);
  const T* l = logits.data<T>();
  T* cnt = counts.data<T>();
  T* sums = score_sums.data<T>();
  // One thread per group, its tokens in order: the sums do not depend on the thread count.
#pragma omp parallel
  {
    std::vector<double> q(static_cast<size_t>(e)), s(static_cast<size_t>(e)),
        acc(static_cast<size_t>(e));
    std::vector<int32_t> idx(static_cast<size_t>(topk));
    std::vector<int64_t> c(static_cast<size_t>(e));
#pragma omp for schedule(static)
    for (int64_t g = 0; g < groups; ++g) {
      std::fill(acc.begin(), acc.end(), 0.0);
      std::fill(c.begin(), c.end(), 0);
      for (int64_t r = g; r < n; r += groups) {
        double sum = 0;
        aux_scores(l + r * e, e, sigmoid, q.data(), s.data(), &sum);
        top_k(q.data(), e, topk, nullptr, idx.data());
        for (int32_t x : idx) ++c[size_t(x)];
        for (int64_t x = 0; x < e; ++x) acc[size_t(x)] += q[size_t(x)];
      }
      for (int64_t x = 0; x < e; ++x) {
        cnt[g * e + x] = T(c[size_t(x)]);
        sums[g * e + x] = T(acc[size_t(x)]);
      }
    }
  }
}

template <typename T>
void aux_loss_backward(const Tensor& logits, const Tensor& weights, bool sigmoid, Tensor& dlogits) {
  const int64_t n = logits.size(0), e = logits.size(1), groups = weights.size(0);
  const T* l = logits.data<T>();
  const T* wt = weights.data<T>();
  T* dl = dlogits.data<T>();
#pragma omp parallel
  {
    std::vector<double> q(static_cast<size_t>(e)), s(static_cast<size_t>(e));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const T* w = wt + (r % groups) * e;
      double sum = 0;
      aux_scores(l + r * e, e, sigmoid, q.data(), s.data(), &sum);
      double wq = 0;
      for (int64_t c = 0; c < e; ++c) wq += double(w[c]) * q[size_t(c)];
      for (int64_t c = 0; c < e; ++c) {
        // softmax: q(w − Σ w q); normalised sigmoid: (w − Σ w q)/S · s(1 − s).
        const double d = sigmoid ? (w[c] - wq) / sum * s[size_t(c)] * (1 - s[size_t(c)])
                                 : q[size_t(c)] * (w[c] - wq);
        dl[r * e + c] += T(d);
      }
    }
  }
}

template <typename T>
double z_loss_sum(const Tensor& logits) {
  const int64_t n = logits.size(0), e = logits.size(1);
  const T* l = logits.data<T>();
  std::vector<double> sq(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const double z = logsumexp_row(l + r * e, e);
    sq[size_t(r)] = z * z;
  }
  double total = 0;
  for (double v : sq) total += v;
  return total;
}

template <typename T>
void z_loss_backward(const Tensor& logits, double scale, Tensor& dlogits) {
  const int64_t n = logits.size(0), e = logits.size(1);
  const T* l = logits.data<T>();
  T* dl = dlogits.data<T>();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* row = l + r * e;
    const double z = logsumexp_row(row, e);
    for (int64_t c = 0; c < e; ++c)
      dl[r * e + c] += T(scale * 2.0 * z * std::exp(double(row[c]) - z));
  }
}

}  // namespace

void moe_topk_forward(const Tensor& logits, const Tensor& expert_bias, const MoeTopkParams& p,
                      Tensor& indices, Tensor& probs) {
  with_logits(logits, [&](auto tag) {
    topk_forward<decltype(tag)>(logits, expert_bias, p, indices, probs);
  });
}

void moe_topk_weights(const Tensor& logits, const Tensor& indices, const MoeTopkParams& p,
                      Tensor& probs) {
  with_logits(logits, [&](auto tag) { topk_weights<decltype(tag)>(logits, indices, p, probs); });
}

void moe_topk_backward(const Tensor& dprobs, const Tensor& logits, const Tensor& indices,
                       const MoeTopkParams& p, Tensor& dlogits) {
  with_logits(logits,
              [&](auto tag) { topk_backward<decltype(tag)>(dprobs, logits, indices, p, dlogits); });
}

void moe_aux_loss_stats(const Tensor& logits, int64_t topk, bool sigmoid, int64_t groups,
                        Tensor& counts, Tensor& score_sums) {
  with_logits(logits, [&](auto tag) {
    aux_loss_stats<decltype(tag)>(logits, topk, sigmoid, groups, counts, score_sums);
  });
}

void moe_aux_loss_backward(const Tensor& logits, const Tensor& weights, bool sigmoid,
                           Tensor& dlogits) {
  with_logits(logits, [&](auto tag) {
    aux_loss_backward<decltype(tag)>(logits, weights, sigmoid, dlogits);
  });
}

double moe_z_loss_sum(const Tensor& logits) {
  double total = 0;
  with_logits(logits, [&](auto tag) { total = z_loss_sum<decltype(tag)>(logits); });
  return total;
}

void moe_z_loss_backward(const Tensor& logits, double scale, Tensor& dlogits) {
  with_logits(logits, [&](auto tag) { z_loss_backward<decltype(tag)>(logits, scale, dlogits); });
}

void moe_expert_bias_update(const Tensor& tokens_per_expert, float rate, Tensor& expert_bias) {
  const int64_t rows = tokens_per_expert.size(0), e = tokens_per_expert.size(1);
  const float* t = tokens_per_expert.data<float>();
  float* b = expert_bias.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = t + r * e;
    double sum = 0;
    for (int64_t c = 0; c < e; ++c) sum += double(row[c]);
    const double mean = sum / double(e);
    for (int64_t c = 0; c < e; ++c) {
      const double offset = mean - double(row[c]);
      const float step = offset > 0 ? rate : offset < 0 ? -rate : 0.0f;
      b[r * e + c] = b[r * e + c] + step;
    }
  }
}

}  // namespace megatron::kernels::cpu
