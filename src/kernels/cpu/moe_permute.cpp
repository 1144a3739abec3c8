// MoE token permutation on CPU (contract: kernels/moe_permute.h, checked by
// kernels/moe_permute.cpp). The slot assignment is a counting sort by expert (one pass over the
// pairs in token order); the gathers run one output row per iteration (OpenMP over rows).
#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

void moe_expert_counts(const Tensor& indices, int64_t num_experts, Tensor& counts) {
  const int32_t* idx = indices.data<int32_t>();
  int64_t* c = counts.data<int64_t>();
  std::fill(c, c + num_experts, 0);
  for (int64_t i = 0; i < indices.numel(); ++i) {
    MT_CHECK(idx[i] >= 0 && idx[i] < num_experts, "moe_expert_counts: expert id ", idx[i],
             " outside [0, ", num_experts, ")");
    ++c[idx[i]];
  }
}

void moe_assign_slots(const Tensor& indices, const Tensor& probs,
                      const std::vector<int64_t>& expert_slots, Tensor& slot_source,
                      Tensor& slot_of) {
  const int64_t pairs = indices.numel(), experts = int64_t(expert_slots.size()) - 1;
  const int32_t* idx = indices.data<int32_t>();
  int32_t* source = slot_source.data<int32_t>();
  int32_t* of = slot_of.data<int32_t>();
  std::fill(source, source + slot_source.numel(), -1);
  std::fill(of, of + pairs, -1);
  // Each expert's pairs in token order.
  std::vector<std::vector<int32_t>> members(static_cast<size_t>(experts));
  for (int64_t i = 0; i < pairs; ++i) {
    MT_CHECK(idx[i] >= 0 && idx[i] < experts, "moe_assign_slots: expert id ", idx[i],
             " outside [0, ", experts, ")");
    members[size_t(idx[i])].push_back(int32_t(i));
  }
  const float* pr = probs.defined() ? probs.data<float>() : nullptr;
  for (int64_t e = 0; e < experts; ++e) {
    std::vector<int32_t>& m = members[size_t(e)];
    const size_t slots = size_t(expert_slots[size_t(e) + 1] - expert_slots[size_t(e)]);
    if (m.size() > slots) {
      if (pr != nullptr) {  // keep the largest probs (ties: the earlier pair), in token order
        std::stable_sort(m.begin(), m.end(), [&](int32_t a, int32_t b) { return pr[a] > pr[b]; });
        m.resize(slots);
        std::sort(m.begin(), m.end());
      } else {
        m.resize(slots);
      }
    }
    for (size_t j = 0; j < m.size(); ++j) {
      const int64_t slot = expert_slots[size_t(e)] + int64_t(j);
      source[slot] = m[j];
      of[m[j]] = int32_t(slot);
    }
  }
}

void moe_permute(const Tensor& x, const Tensor& slot_source, int64_t topk, Tensor& out) {
  const int64_t m = slot_source.numel(), h = x.size(1);
  dispatch_float(x.dtype(), "moe_permute x", [&](auto tag) {
    using T = decltype(tag);
    const T* src = x.data<T>();
    const int32_t* s = slot_source.data<int32_t>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < m; ++r) {
      if (s[r] < 0)
        std::fill(o + r * h, o + (r + 1) * h, from_f32<T>(0.f));
      else
        std::copy(src + (s[r] / topk) * h, src + (s[r] / topk + 1) * h, o + r * h);
    }
  });
}

void moe_permute_backward(const Tensor& dout, const Tensor& slot_of, int64_t topk, Tensor& dx) {
  const int64_t n = dx.size(0), h = dx.size(1);
  dispatch_float(dout.dtype(), "moe_permute_backward dout", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    const int32_t* of = slot_of.data<int32_t>();
    T* d = dx.data<T>();
#pragma omp parallel
    {
      std::vector<float> acc(static_cast<size_t>(h));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < n; ++r) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t j = 0; j < topk; ++j) {
          const int32_t slot = of[r * topk + j];
          if (slot < 0) continue;
          const T* row = g + int64_t(slot) * h;
          for (int64_t c = 0; c < h; ++c) acc[size_t(c)] += to_f32(row[c]);
        }
        for (int64_t c = 0; c < h; ++c) d[r * h + c] = from_f32<T>(acc[size_t(c)]);
      }
    }
  });
}

void moe_unpermute(const Tensor& y, const Tensor& slot_of, const Tensor& probs, Tensor& out) {
  const int64_t n = out.size(0), h = out.size(1), k = probs.size(1);
  dispatch_float(y.dtype(), "moe_unpermute y", [&](auto tag) {
    using T = decltype(tag);
    const T* src = y.data<T>();
    const int32_t* of = slot_of.data<int32_t>();
    const float* pr = probs.data<float>();
    T* o = out.data<T>();
#pragma omp parallel
    {
      std::vector<float> acc(static_cast<size_t>(h));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < n; ++r) {
        std::fill(acc.begin(), acc.end(), 0.f);
        for (int64_t j = 0; j < k; ++j) {
          const int32_t slot = of[r * k + j];
          if (slot < 0) continue;
          const float p = pr[r * k + j];
          const T* row = src + int64_t(slot) * h;
          for (int64_t c = 0; c < h; ++c) acc[size_t(c)] += p * to_f32(row[c]);
        }
        for (int64_t c = 0; c < h; ++c) o[r * h + c] = from_f32<T>(acc[size_t(c)]);
      }
    }
  });
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& slot_source,
                            const Tensor& slot_of, const Tensor& probs, Tensor& dy,
                            Tensor& dprobs) {
  const int64_t m = y.size(0), h = y.size(1), n = probs.size(0), k = probs.size(1);
  dispatch_float(y.dtype(), "moe_unpermute_backward y", [&](auto tag) {
    using T = decltype(tag);
    const T* g = dout.data<T>();
    const T* yv = y.data<T>();
    const int32_t* source = slot_source.data<int32_t>();
    const int32_t* of = slot_of.data<int32_t>();
    const float* pr = probs.data<float>();
    T* d = dy.data<T>();
    float* dp = dprobs.data<float>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < m; ++r) {
      const int32_t pair = source[r];
      if (pair < 0) {
        std::fill(d + r * h, d + (r + 1) * h, from_f32<T>(0.f));
        continue;
      }
      const float p = pr[pair];
      const T* row = g + int64_t(pair / k) * h;
      for (int64_t c = 0; c < h; ++c) d[r * h + c] = from_f32<T>(p * to_f32(row[c]));
    }
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n * k; ++i) {
      const int32_t slot = of[i];
      double dot = 0;
      if (slot >= 0) {
        const T* a = g + (i / k) * h;
        const T* b = yv + int64_t(slot) * h;
        for (int64_t c = 0; c < h; ++c) dot += double(to_f32(a[c])) * double(to_f32(b[c]));
      }
      dp[i] = float(dot);
    }
  });
}

}  // namespace megatron::kernels::cpu
