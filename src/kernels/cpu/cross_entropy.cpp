// Vocab-sharded softmax cross-entropy pieces on CPU (contract: kernels/cross_entropy.h, checked
// by kernels/cross_entropy.cpp). Statistics in f32; one row of logits per OpenMP iteration.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels::cpu {

void cross_entropy_row_max(const Tensor& logits, int64_t valid_cols, Tensor& row_max) {
  const int64_t n = logits.size(0);
  const int64_t v = logits.size(1);
  dispatch_float(logits.dtype(), "cross_entropy_row_max logits", [&](auto tag) {
    using T = decltype(tag);
    const T* l = logits.data<T>();      // [N, V_local]
    float* mx = row_max.data<float>();  // [N]
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const T* lr = l + r * v;
      const float m = max_reduce(valid_cols, [&](int64_t j) { return to_f32(lr[j]); });
      mx[r] = m;
    }
  });
}

void cross_entropy_sum_exp_target(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                  int64_t valid_cols, const Tensor& row_max, Tensor& sum_exp,
                                  Tensor& target_logit) {
  const int64_t n = logits.size(0), v = logits.size(1);
  const int32_t* tg = targets.data<int32_t>();  // [N]
  dispatch_float(logits.dtype(), "cross_entropy_sum_exp_target logits", [&](auto tag) {
    using T = decltype(tag);
    const T* l = logits.data<T>();            // [N, V_local]
    const float* mx = row_max.data<float>();  // [N]
    float* se = sum_exp.data<float>();        // [N]
    float* tl = target_logit.data<float>();   // [N]
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const T* lr = l + r * v;
      const float m = mx[r];
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < valid_cols; ++j) s += exp_approx(to_f32(lr[j]) - m);
      se[r] = s;
      const int64_t local = int64_t(tg[r]) - vocab_start;
      tl[r] = (local >= 0 && local < valid_cols) ? to_f32(lr[local]) : 0.f;
    }
  });
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        Tensor& loss) {
  const int64_t n = row_max.size(0);
  const float* mx = row_max.data<float>();
  const float* se = sum_exp.data<float>();
  const float* tl = target_logit.data<float>();
  float* out = loss.data<float>();
#pragma omp parallel for simd schedule(static)
  for (int64_t r = 0; r < n; ++r) out[r] = std::log(se[r]) + mx[r] - tl[r];
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                            int64_t valid_cols, const Tensor& row_max, const Tensor& sum_exp,
                            const Tensor& dloss, Tensor& dlogits) {
  const int64_t n = logits.size(0);
  const int64_t v = logits.size(1);
  dispatch_float(logits.dtype(), "cross_entropy_backward logits", [&](auto tag) {
    using T = decltype(tag);
    const T* l = logits.data<T>();                // [N, V_local]
    const int32_t* tg = targets.data<int32_t>();  // [N]
    const float* mx = row_max.data<float>();      // [N]
    const float* se = sum_exp.data<float>();      // [N]
    const float* dl = dloss.data<float>();        // [N]
    T* dlg = dlogits.data<T>();                   // [N, V_local], may alias logits
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const T* lr = l + r * v;
      T* dr = dlg + r * v;
      const float m = mx[r], scale = dl[r] / se[r], d = dl[r];
      const int64_t local = int64_t(tg[r]) - vocab_start;
#pragma omp simd
      for (int64_t j = 0; j < valid_cols; ++j)
        dr[j] = from_f32<T>(exp_approx(to_f32(lr[j]) - m) * scale - (j == local ? d : 0.f));
      for (int64_t j = valid_cols; j < v; ++j) dr[j] = from_f32<T>(0.f);
    }
  });
}

}  // namespace megatron::kernels::cpu
