// The MoE router's kernels on CUDA (contract: kernels/moe_router.h; CPU twin:
// kernels/cpu/moe_router.cpp). A router row has E experts (tens to a few hundred), so one
// thread owns one token's row and computes in double, as the CPU does, with the CPU's
// selection order (k passes, ties to the lower index): the chosen experts are the CPU's. The
// logits (and their gradients, the losses' statistics and weights) are T = f32 or f64, the
// router dtype.
// Sums over tokens (the load-balancing statistics, the z-loss) run in token order in one
// thread per output, so they are deterministic.
#include <math_constants.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace megatron::kernels::cuda {

namespace {

constexpr int64_t kMaxChoices = 64;  // k and group_topk per token (per-thread arrays)

__device__ double sigmoid(double x) {
  return 1.0 / (1.0 + exp(-x));
}

template <typename T>
__device__ double row_max(const T* row, int64_t e) {
  double m = -double(CUDART_INF_F);
  for (int64_t c = 0; c < e; ++c) m = fmax(m, double(row[c]));
  return m;
}

template <typename T>
__device__ double row_exp_sum(const T* row, int64_t e, double m) {
  double s = 0;
  for (int64_t c = 0; c < e; ++c) s += exp(double(row[c]) - m);
  return s;
}

// A token's selection score of expert c (kernels/moe_router.h).
template <typename T>
struct Selection {
  const T* logit;
  const float* bias;  // may be null
  bool sigmoid_scores, pre_softmax;
  double m = 0, sum = 1;  // the row's max and Σ exp(l − max), with pre_softmax
  __device__ double operator()(int64_t c) const {
    if (sigmoid_scores) return sigmoid(logit[c]) + (bias ? double(bias[c]) : 0.0);
    if (pre_softmax) return exp(double(logit[c]) - m) / sum;
    return logit[c];
  }
};

__device__ bool contains(const int32_t* list, int64_t n, int64_t x) {
  for (int64_t i = 0; i < n; ++i)
    if (list[i] == x) return true;
  return false;
}

// The k largest scores among experts [begin, end) whose group (c / per_group) is in
// groups[0..ngroups) (ngroups < 0: any), decreasing, ties to the lower index.
template <typename Score>
__device__ void top_k(const Score& score, int64_t begin, int64_t end, int64_t k,
                      const int32_t* groups, int64_t ngroups, int64_t per_group, int32_t* out) {
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    double best_score = 0;
    for (int64_t c = begin; c < end; ++c) {
      if (contains(out, j, c) || (ngroups >= 0 && !contains(groups, ngroups, c / per_group)))
        continue;
      const double s = score(c);
      if (best < 0 || s > best_score) {
        best = c;
        best_score = s;
      }
    }
    out[j] = int32_t(best);
  }
}

struct GroupScore {
  const double* v;
  __device__ double operator()(int64_t g) const { return v[g]; }
};

template <typename T>
__device__ void route_row(const Selection<T>& sel, int64_t e, const MoeTopkParams& p,
                          int32_t* idx) {
  if (p.num_groups <= 0) {
    top_k(sel, 0, e, p.topk, nullptr, -1, 1, idx);
    return;
  }
  const int64_t per_group = e / p.num_groups, m = p.topk / p.group_topk;
  double group_score[kMaxChoices];
  int32_t best[kMaxChoices];
  for (int64_t g = 0; g < p.num_groups; ++g) {
    top_k(sel, g * per_group, (g + 1) * per_group, m, nullptr, -1, 1, best);
    double s = 0;
    for (int64_t i = 0; i < m; ++i) s += sel(best[i]);
    group_score[g] = s;
  }
  int32_t groups[kMaxChoices];
  top_k(GroupScore{group_score}, 0, p.num_groups, p.group_topk, nullptr, -1, 1, groups);
  top_k(sel, 0, e, p.topk, groups, p.group_topk, per_group, idx);
}

// The chosen weights before the scaling factor (kernels/cpu/moe_router.cpp, row_weights).
template <typename T>
__device__ void row_weights(const T* l, const int32_t* idx, const MoeTopkParams& p, double m,
                            double sum, double* w) {
  const int64_t k = p.topk;
  if (p.sigmoid) {
    double s = 1e-20;
    for (int64_t j = 0; j < k; ++j) s += sigmoid(l[idx[j]]);
    for (int64_t j = 0; j < k; ++j) w[j] = k > 1 ? sigmoid(l[idx[j]]) / s : sigmoid(l[idx[j]]);
  } else if (p.pre_softmax) {
    for (int64_t j = 0; j < k; ++j) w[j] = exp(double(l[idx[j]]) - m) / sum;
  } else {
    double mx = -double(CUDART_INF_F), s = 0;
    for (int64_t j = 0; j < k; ++j) mx = fmax(mx, double(l[idx[j]]));
    for (int64_t j = 0; j < k; ++j) s += (w[j] = exp(double(l[idx[j]]) - mx));
    for (int64_t j = 0; j < k; ++j) w[j] /= s;
  }
}

template <typename T>
__global__ void topk_forward_kernel(const T* logits, const float* bias, int64_t n, int64_t e,
                                    MoeTopkParams p, int32_t* indices, float* probs) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const T* l = logits + r * e;
    Selection<T> sel{l, bias, p.sigmoid, p.pre_softmax};
    if (p.pre_softmax) {
      sel.m = row_max(l, e);
      sel.sum = row_exp_sum(l, e, sel.m);
    }
    int32_t* idx = indices + r * p.topk;
    route_row(sel, e, p, idx);
    double w[kMaxChoices];
    row_weights(l, idx, p, sel.m, sel.sum, w);
    for (int64_t j = 0; j < p.topk; ++j) probs[r * p.topk + j] = float(w[j] * p.scaling_factor);
  }
}

template <typename T>
__global__ void topk_weights_kernel(const T* logits, const int32_t* indices, int64_t n, int64_t e,
                                    MoeTopkParams p, float* probs) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const T* l = logits + r * e;
    double m = 0, sum = 1;
    if (p.pre_softmax) {
      m = row_max(l, e);
      sum = row_exp_sum(l, e, m);
    }
    double w[kMaxChoices];
    row_weights(l, indices + r * p.topk, p, m, sum, w);
    for (int64_t j = 0; j < p.topk; ++j) probs[r * p.topk + j] = float(w[j] * p.scaling_factor);
  }
}

template <typename T>
__global__ void topk_backward_kernel(const float* dprobs, const T* logits, const int32_t* indices,
                                     int64_t n, int64_t e, MoeTopkParams p, T* dlogits) {
  const int64_t k = p.topk;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const T* l = logits + r * e;
    const int32_t* ix = indices + r * k;
    T* d = dlogits + r * e;
    double g[kMaxChoices];
    for (int64_t j = 0; j < k; ++j) g[j] = double(dprobs[r * k + j]) * p.scaling_factor;
    if (p.sigmoid) {
      double sum = 1e-20, gw = 0;
      for (int64_t j = 0; j < k; ++j) sum += sigmoid(l[ix[j]]);
      for (int64_t j = 0; j < k; ++j) gw += g[j] * sigmoid(l[ix[j]]) / sum;
      for (int64_t j = 0; j < k; ++j) {
        const double s = sigmoid(l[ix[j]]);
        const double ds = k > 1 ? (g[j] - gw) / sum : g[j];
        d[ix[j]] += T(ds * s * (1 - s));
      }
    } else if (p.pre_softmax) {
      const double m = row_max(l, e), sum = row_exp_sum(l, e, m);
      double gs = 0;
      for (int64_t j = 0; j < k; ++j) gs += g[j] * exp(double(l[ix[j]]) - m) / sum;
      for (int64_t c = 0; c < e; ++c) {
        double gc = 0;
        for (int64_t j = 0; j < k; ++j)
          if (ix[j] == c) gc = g[j];
        d[c] += T(exp(double(l[c]) - m) / sum * (gc - gs));
      }
    } else {
      double w[kMaxChoices];
      row_weights(l, ix, p, 0, 1, w);
      double gw = 0;
      for (int64_t j = 0; j < k; ++j) gw += g[j] * w[j];
      for (int64_t j = 0; j < k; ++j) d[ix[j]] += T(w[j] * (g[j] - gw));
    }
  }
}

// The load-balancing scores q of expert c in a row (softmax, or normalised sigmoids).
template <typename T>
struct AuxScore {
  const T* l;
  bool sigmoid_scores;
  double m, sum;  // softmax: max and Σ exp; sigmoid: Σ sigmoid + 1e-20
  __device__ double operator()(int64_t c) const {
    return sigmoid_scores ? sigmoid(l[c]) / sum : exp(double(l[c]) - m) / sum;
  }
};

template <typename T>
__device__ AuxScore<T> aux_score(const T* l, int64_t e, bool sig) {
  if (sig) {
    double s = 1e-20;
    for (int64_t c = 0; c < e; ++c) s += sigmoid(l[c]);
    return {l, true, 0, s};
  }
  const double m = row_max(l, e);
  return {l, false, m, row_exp_sum(l, e, m)};
}

// Each token's routing for the loss: chosen f32 [N, E] gets 1 where routed, else 0.
template <typename T>
__global__ void aux_choice_kernel(const T* logits, int64_t n, int64_t e, int64_t topk, bool sig,
                                  float* chosen) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const AuxScore<T> q = aux_score(logits + r * e, e, sig);
    int32_t idx[kMaxChoices];
    top_k(q, 0, e, topk, nullptr, -1, 1, idx);
    for (int64_t c = 0; c < e; ++c) chosen[r * e + c] = contains(idx, topk, c) ? 1.f : 0.f;
  }
}

// One thread per (group, expert): its tokens' counts and score sums, in token order.
template <typename T>
__global__ void aux_sums_kernel(const T* logits, const float* chosen, int64_t n, int64_t e,
                                int64_t groups, bool sig, T* counts, T* sums) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= groups * e) return;
  const int64_t g = i / e, c = i % e;
  double count = 0, acc = 0;
  for (int64_t r = g; r < n; r += groups) {
    count += chosen[r * e + c];
    acc += aux_score(logits + r * e, e, sig)(c);
  }
  counts[i] = T(count);
  sums[i] = T(acc);
}

template <typename T>
__global__ void aux_backward_kernel(const T* logits, const T* weights, int64_t n, int64_t e,
                                    int64_t groups, bool sig, T* dlogits) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const T* l = logits + r * e;
    const T* w = weights + (r % groups) * e;
    const AuxScore<T> q = aux_score(l, e, sig);
    double wq = 0;
    for (int64_t c = 0; c < e; ++c) wq += double(w[c]) * q(c);
    for (int64_t c = 0; c < e; ++c) {
      double d;
      if (sig) {
        const double s = sigmoid(l[c]);
        d = (w[c] - wq) / q.sum * s * (1 - s);
      } else {
        d = q(c) * (w[c] - wq);
      }
      dlogits[r * e + c] += T(d);
    }
  }
}

template <typename T>
__device__ double logsumexp_row(const T* l, int64_t e) {
  const double m = row_max(l, e);
  return m + log(row_exp_sum(l, e, m));
}

template <typename T>
__global__ void z_squares_kernel(const T* logits, int64_t n, int64_t e, double* sq) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const double z = logsumexp_row(logits + r * e, e);
    sq[r] = z * z;
  }
}

// One warp, one working lane: the sum in row order, as the CPU adds it (the rows are few, one per
// token; a whole warp because a block is launched in warps).
__global__ void sum_in_order_kernel(const double* v, int64_t n, double* out) {
  if (threadIdx.x != 0) return;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i];
  *out = s;
}

template <typename T>
__global__ void z_backward_kernel(const T* logits, int64_t n, int64_t e, double scale, T* dlogits) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
       r += int64_t(gridDim.x) * blockDim.x) {
    const T* l = logits + r * e;
    const double z = logsumexp_row(l, e);
    for (int64_t c = 0; c < e; ++c)
      dlogits[r * e + c] += T(scale * 2.0 * z * exp(double(l[c]) - z));
  }
}

// One thread per router row: the row's count sum in expert order (as the CPU), then its biases.
__global__ void expert_bias_update_kernel(const float* tokens, int64_t rows, int64_t e, float rate,
                                          float* bias) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* row = tokens + r * e;
  double sum = 0;
  for (int64_t c = 0; c < e; ++c) sum += double(row[c]);
  const double mean = sum / double(e);
  for (int64_t c = 0; c < e; ++c) {
    const double offset = mean - double(row[c]);
    const float step = offset > 0 ? rate : offset < 0 ? -rate : 0.0f;
    bias[r * e + c] = bias[r * e + c] + step;
  }
}

// Calls fn(T{}) with T = float or double, the logits' dtype (kernels/moe_router.cpp checked it).
template <typename Fn>
void with_logits(const Tensor& logits, Fn&& fn) {
  if (logits.dtype() == DType::F64) return fn(double{});
  fn(float{});
}

void check_choices(const MoeTopkParams& p) {
  MT_CHECK(p.topk <= kMaxChoices && p.num_groups <= kMaxChoices,
           "the CUDA MoE router takes at most ", kMaxChoices, " experts per token and ",
           kMaxChoices, " expert groups; got k = ", p.topk, ", ", p.num_groups, " groups");
}

}  // namespace

void moe_topk_forward(const Tensor& logits, const Tensor& expert_bias, const MoeTopkParams& p,
                      Tensor& indices, Tensor& probs) {
  check_choices(p);
  const int64_t n = logits.size(0), e = logits.size(1);
  if (n == 0) return;
  with_logits(logits, [&](auto tag) {
    using T = decltype(tag);
    topk_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        ptr<T>(logits), expert_bias.defined() ? ptr<float>(expert_bias) : nullptr, n, e, p,
        ptr<int32_t>(indices), ptr<float>(probs));
  });
  megatron::cuda::check_launch("moe_topk_forward");
}

void moe_topk_weights(const Tensor& logits, const Tensor& indices, const MoeTopkParams& p,
                      Tensor& probs) {
  check_choices(p);
  const int64_t n = logits.size(0), e = logits.size(1);
  if (n == 0) return;
  with_logits(logits, [&](auto tag) {
    using T = decltype(tag);
    topk_weights_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        ptr<T>(logits), ptr<int32_t>(indices), n, e, p, ptr<float>(probs));
  });
  megatron::cuda::check_launch("moe_topk_weights");
}

void moe_topk_backward(const Tensor& dprobs, const Tensor& logits, const Tensor& indices,
                       const MoeTopkParams& p, Tensor& dlogits) {
  check_choices(p);
  const int64_t n = logits.size(0), e = logits.size(1);
  if (n == 0) return;
  with_logits(logits, [&](auto tag) {
    using T = decltype(tag);
    topk_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        ptr<float>(dprobs), ptr<T>(logits), ptr<int32_t>(indices), n, e, p, ptr<T>(dlogits));
  });
  megatron::cuda::check_launch("moe_topk_backward");
}

void moe_aux_loss_stats(const Tensor& logits, int64_t topk, bool sigmoid, int64_t groups,
                        Tensor& counts, Tensor& score_sums) {
  MT_CHECK(topk <= kMaxChoices, "the CUDA MoE router takes at most ", kMaxChoices,
           " experts per token, got ", topk);
  const int64_t n = logits.size(0), e = logits.size(1);
  Tensor chosen = Tensor::empty({n, e}, DType::F32, logits.device());
  with_logits(logits, [&](auto tag) {
    using T = decltype(tag);
    if (n > 0) {
      aux_choice_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(ptr<T>(logits), n, e, topk,
                                                                     sigmoid, ptr<float>(chosen));
      megatron::cuda::check_launch("moe_aux_loss_stats");
    }
    aux_sums_kernel<T><<<blocks_for(groups * e), kThreads, 0, stream()>>>(
        ptr<T>(logits), ptr<float>(chosen), n, e, groups, sigmoid, ptr<T>(counts),
        ptr<T>(score_sums));
    megatron::cuda::check_launch("moe_aux_loss_stats");
  });
}

void moe_aux_loss_backward(const Tensor& logits, const Tensor& weights, bool sigmoid,
                           Tensor& dlogits) {
  const int64_t n = logits.size(0), e = logits.size(1);
  if (n == 0) return;
  with_logits(logits, [&](auto tag) {
    using T = decltype(tag);
    aux_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(
        ptr<T>(logits), ptr<T>(weights), n, e, weights.size(0), sigmoid, ptr<T>(dlogits));
  });
  megatron::cuda::check_launch("moe_aux_loss_backward");
}

double moe_z_loss_sum(const Tensor& logits) {
  const int64_t n = logits.size(0), e = logits.size(1);
  if (n == 0) return 0.0;
  Tensor sq = Tensor::empty({n + 1}, DType::F64, logits.device());
  double* v = static_cast<double*>(sq.raw_data());
  with_logits(logits, [&](auto tag) {
    using T = decltype(tag);
    z_squares_kernel<T><<<blocks_for(n), kThreads, 0, stream()>>>(ptr<T>(logits), n, e, v);
  });
  sum_in_order_kernel<<<1, 32, 0, stream()>>>(v, n, v + n);
  megatron::cuda::check_launch("moe_z_loss_sum");
  return element_value<double>(sq, n);
}

void moe_z_loss_backward(const Tensor& logits, double scale, Tensor& dlogits) {
  const int64_t n = logits.size(0), e = logits.size(1);
  if (n == 0) return;
  with_logits(logits, [&](auto tag) {
    using T = decltype(tag);
    z_backward_kernel<T>
        <<<blocks_for(n), kThreads, 0, stream()>>>(ptr<T>(logits), n, e, scale, ptr<T>(dlogits));
  });
  megatron::cuda::check_launch("moe_z_loss_backward");
}

void moe_expert_bias_update(const Tensor& tokens_per_expert, float rate, Tensor& expert_bias) {
  const int64_t rows = tokens_per_expert.size(0), e = tokens_per_expert.size(1);
  if (rows == 0) return;
  expert_bias_update_kernel<<<blocks_for(rows), kThreads, 0, stream()>>>(
      ptr<float>(tokens_per_expert), rows, e, rate, ptr<float>(expert_bias));
  megatron::cuda::check_launch("moe_expert_bias_update");
}

}  // namespace megatron::kernels::cuda
