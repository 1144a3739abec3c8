// Bias + tanh on CPU (contract: kernels/bias_tanh.h, checked by kernels/bias_tanh.cpp). Rows
// in parallel for the elementwise part; the bias gradient sums each column in row order on one
// thread (deterministic).
#include <cmath>

#include "core/dtype.h"
#include "kernels/cpu/cpu_kernels.h"

namespace megatron::kernels::cpu {

namespace {

inline float load(float x) {
  return x;
}
inline float load(bf16 x) {
  return float(x);
}
inline void store(float& dst, float v) {
  dst = v;
}
inline void store(bf16& dst, float v) {
  dst = bf16(v);
}

template <typename T>
void forward_rows(const T* x, const T* bias, T* y, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < c; ++j)
      store(y[r * c + j], std::tanh(load(x[r * c + j]) + (bias ? load(bias[j]) : 0.f)));
}

template <typename T>
void backward_rows(const T* dy, const T* y, T* dx, float* dbias, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < c; ++j) {
      const float t = load(y[r * c + j]);
      store(dx[r * c + j], load(dy[r * c + j]) * (1.f - t * t));
    }
  if (!dbias) return;
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < c; ++j) {
    float s = 0.f;
    for (int64_t r = 0; r < n; ++r) s += load(dx[r * c + j]);
    dbias[j] += s;
  }
}

template <typename Fn>
void dispatch(DType dtype, const char* what, Fn&& fn) {
  if (dtype == DType::F32)
    fn(float{});
  else if (dtype == DType::BF16)
    fn(bf16{});
  else
    MT_THROW(what, " has dtype ", dtype_name(dtype), ", expected f32 or bf16");
}

}  // namespace

void bias_tanh_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  dispatch(x.dtype(), "bias_tanh_forward: x", [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(x.data<T>(), bias.defined() ? bias.data<T>() : nullptr, y.data<T>(), x.size(0),
                    x.size(1));
  });
}

void bias_tanh_backward(const Tensor& dy, const Tensor& y, Tensor& dx, Tensor& dbias) {
  dispatch(y.dtype(), "bias_tanh_backward: y", [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dy.data<T>(), y.data<T>(), dx.data<T>(),
                     dbias.defined() ? dbias.data<float>() : nullptr, y.size(0), y.size(1));
  });
}

}  // namespace megatron::kernels::cpu
