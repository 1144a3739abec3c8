// Fused AdamW over flat f32 buffers on CPU (contract: kernels/adamw.h, checked by
// kernels/adamw.cpp), in torch.optim.AdamW's order: decay the old weight, update the moments,
// step with the bias-corrected moments.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

void adamw_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  const AdamWHyper& h) {
  // Bias corrections in double: β^step underflows gracefully and 1 − β^step keeps its digits.
  const float bc1 = float(1.0 - std::pow(double(h.beta1), double(h.step)));
  const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(double(h.beta2), double(h.step))));
  const float step_size = h.lr / bc1;
  const float decay = 1.f - h.lr * h.weight_decay;
  const float b1 = h.beta1, b2 = h.beta2, eps = h.eps;
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const int64_t n = param.numel();
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = b1 * m[i] + (1.f - b1) * gi;
    const float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

}  // namespace megatron::kernels::cpu
