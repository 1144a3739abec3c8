// The per-row sigmoid gate on CPU (contract: kernels/sigmoid_gate.h; CUDA twin:
// kernels/cuda/sigmoid_gate.cu): one row per iteration (OpenMP over rows).
#include <cmath>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

float gate(float logit) {
  return float(1.0 / (1.0 + std::exp(-double(logit))));
}

}  // namespace

void sigmoid_gate_forward(const Tensor& y, const Tensor& logits, Tensor& out) {
  const int64_t n = y.size(0), c = y.size(1);
  const float* l = logits.data<float>();
  dispatch_float(y.dtype(), "sigmoid_gate_forward y", [&](auto tag) {
    using T = decltype(tag);
    const T* yv = y.data<T>();
    T* o = out.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const float g = gate(l[r]);
      for (int64_t j = 0; j < c; ++j)
        o[r * c + j] = from_f32<T>(to_f32(o[r * c + j]) + g * to_f32(yv[r * c + j]));
    }
  });
}

void sigmoid_gate_backward(const Tensor& dout, const Tensor& y, const Tensor& logits, Tensor& dy,
                           Tensor& dlogits) {
  const int64_t n = y.size(0), c = y.size(1);
  const float* l = logits.data<float>();
  float* dl = dlogits.data<float>();
  dispatch_float(y.dtype(), "sigmoid_gate_backward y", [&](auto tag) {
    using T = decltype(tag);
    const T* d = dout.data<T>();
    const T* yv = y.data<T>();
    T* dyv = dy.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const float g = gate(l[r]);
      double dot = 0;
      for (int64_t j = 0; j < c; ++j) {
        dot += double(to_f32(d[r * c + j])) * double(to_f32(yv[r * c + j]));
        dyv[r * c + j] = from_f32<T>(g * to_f32(d[r * c + j]));
      }
      dl[r] = float(dot * double(g) * (1.0 - double(g)));
    }
  });
}

}  // namespace megatron::kernels::cpu
