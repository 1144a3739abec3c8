// Vocab-sharded softmax cross-entropy pieces on CPU (contract: kernels/cross_entropy.h).
// Statistics in f32; one row of logits per OpenMP iteration.
#include "kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels {

namespace {

// Checks logits [N, V_local] and valid_cols; returns N.
int64_t check_logits(const Tensor& logits, int64_t valid_cols, const char* kernel) {
  cpu::check_float_contiguous(logits, kernel);
  MT_CHECK(logits.dim() == 2, kernel, ": logits must be [N, V_local], got ", logits.describe());
  MT_CHECK(valid_cols >= 0 && valid_cols <= logits.size(1), kernel, ": valid_cols ", valid_cols,
           " must be in [0, V_local = ", logits.size(1), "]");
  return logits.size(0);
}

void check_stat(const Tensor& t, int64_t n, const char* what) {
  check_shape(t, {n}, what);
  check_dtype(t, DType::F32, what);
  check_contiguous(t, what);
}

void check_targets(const Tensor& targets, int64_t n, const char* what) {
  check_shape(targets, {n}, what);
  check_dtype(targets, DType::I32, what);
  check_contiguous(targets, what);
}

}  // namespace

void cross_entropy_row_max(const Tensor& logits, int64_t valid_cols, Tensor& row_max) {
  cpu::require_cpu("cross_entropy_row_max", {&logits, &row_max});
  const int64_t n = check_logits(logits, valid_cols, "cross_entropy_row_max logits");
  check_stat(row_max, n, "cross_entropy_row_max row_max");
  const int64_t v = logits.size(1);
  cpu::dispatch_float(logits.dtype(), "cross_entropy_row_max logits", [&](auto tag) {
    using T = decltype(tag);
    const T* l = logits.data<T>();      // [N, V_local]
    float* mx = row_max.data<float>();  // [N]
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const T* lr = l + r * v;
      const float m = cpu::max_reduce(valid_cols, [&](int64_t j) { return cpu::to_f32(lr[j]); });
      mx[r] = m;
    }
  });
}

void cross_entropy_sum_exp_target(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                  int64_t valid_cols, const Tensor& row_max, Tensor& sum_exp,
                                  Tensor& target_logit) {
  cpu::require_cpu("cross_entropy_sum_exp_target",
                   {&logits, &targets, &row_max, &sum_exp, &target_logit});
  const int64_t n = check_logits(logits, valid_cols, "cross_entropy_sum_exp_target logits");
  check_targets(targets, n, "cross_entropy_sum_exp_target targets");
  check_stat(row_max, n, "cross_entropy_sum_exp_target row_max");
  check_stat(sum_exp, n, "cross_entropy_sum_exp_target sum_exp");
  check_stat(target_logit, n, "cross_entropy_sum_exp_target target_logit");
  const int64_t v = logits.size(1);
  const int32_t* tg = targets.data<int32_t>();  // [N]
  for (int64_t r = 0; r < n; ++r)
    MT_CHECK(tg[r] >= 0, "cross_entropy target ", r, " is ", tg[r], ", expected a vocabulary id");
  cpu::dispatch_float(logits.dtype(), "cross_entropy_sum_exp_target logits", [&](auto tag) {
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
      for (int64_t j = 0; j < valid_cols; ++j) s += cpu::exp_approx(cpu::to_f32(lr[j]) - m);
      se[r] = s;
      const int64_t local = int64_t(tg[r]) - vocab_start;
      tl[r] = (local >= 0 && local < valid_cols) ? cpu::to_f32(lr[local]) : 0.f;
    }
  });
}

void cross_entropy_loss(const Tensor& row_max, const Tensor& sum_exp, const Tensor& target_logit,
                        Tensor& loss) {
  cpu::require_cpu("cross_entropy_loss", {&row_max, &sum_exp, &target_logit, &loss});
  MT_CHECK(row_max.dim() == 1, "cross_entropy_loss row_max must be [N], got ", row_max.describe());
  const int64_t n = row_max.size(0);
  check_stat(row_max, n, "cross_entropy_loss row_max");
  check_stat(sum_exp, n, "cross_entropy_loss sum_exp");
  check_stat(target_logit, n, "cross_entropy_loss target_logit");
  check_stat(loss, n, "cross_entropy_loss loss");
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
  cpu::require_cpu("cross_entropy_backward",
                   {&logits, &targets, &row_max, &sum_exp, &dloss, &dlogits});
  const int64_t n = check_logits(logits, valid_cols, "cross_entropy_backward logits");
  check_targets(targets, n, "cross_entropy_backward targets");
  check_stat(row_max, n, "cross_entropy_backward row_max");
  check_stat(sum_exp, n, "cross_entropy_backward sum_exp");
  check_stat(dloss, n, "cross_entropy_backward dloss");
  check_shape(dlogits, logits.shape(), "cross_entropy_backward dlogits");
  check_dtype(dlogits, logits.dtype(), "cross_entropy_backward dlogits");
  check_contiguous(dlogits, "cross_entropy_backward dlogits");
  const int64_t v = logits.size(1);
  cpu::dispatch_float(logits.dtype(), "cross_entropy_backward logits", [&](auto tag) {
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
        dr[j] = cpu::from_f32<T>(cpu::exp_approx(cpu::to_f32(lr[j]) - m) * scale -
                                 (j == local ? d : 0.f));
      for (int64_t j = valid_cols; j < v; ++j) dr[j] = cpu::from_f32<T>(0.f);
    }
  });
}

}  // namespace megatron::kernels
