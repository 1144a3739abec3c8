// Fused AdamW over flat f32 buffers on CPU (contract: kernels/adamw.h, checked by
// kernels/adamw.cpp), in torch.optim.AdamW's order: decay the old weight, update the moments,
// step with the bias-corrected moments.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h, const std::vector<AdamWRun>& runs) {
  if (runs.empty()) return;
  // Bias corrections in double: β^step underflows gracefully and 1 − β^step keeps its digits.
  const float bc1 = float(1.0 - std::pow(double(h.beta1), double(h.step)));
  const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(h.beta2), double(h.step))));
  const float step_size = h.lr / bc1;
  const float b1 = h.beta1, b2 = h.beta2, eps = h.eps;
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const int64_t first = runs.front().begin, last = runs.back().end;
  // One parallel region for all runs: each thread takes an equal slice of [first, last) and
  // updates the parts of the runs inside it. A GPT's ~100 alternating weight / bias runs as
  // ~100 regions cost a barrier each (milliseconds when a thread is descheduled) and left
  // both threads a share of every 768-element bias.
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t lo = first + (last - first) * t / threads;
    const int64_t hi = first + (last - first) * (t + 1) / threads;
    for (const AdamWRun& r : runs) {
      const int64_t begin = std::max(lo, r.begin), end = std::min(hi, r.end);
      const float decay = 1.f - h.lr * (r.decay ? h.weight_decay : 0.f);
#pragma omp simd
      for (int64_t i = begin; i < end; ++i) {
        const float gi = g[i];
        const float mi = b1 * m[i] + (1.f - b1) * gi;
        const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
      }
    }
  }
}

}  // namespace megatron::kernels::cpu
