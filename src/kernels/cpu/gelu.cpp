// Bias + GeLU (tanh approximation) forward/backward on CPU (contract: kernels/gelu.h).
#include "kernels/gelu.h"

#include <vector>

#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/vector_math.h"

namespace megatron::kernels {

namespace {

template <typename T>
void forward_rows(const T* x, const T* bias, T* y, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    const T* xr = x + r * c;  // [C]
    T* yr = y + r * c;        // [C]
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) {
      const float u = cpu::to_f32(xr[j]) + cpu::to_f32(bias[j]);
      yr[j] = cpu::from_f32<T>(cpu::gelu(u));
    }
  }
}

// dbias partial sums per chunk of rows [chunks, C], summed in chunk order (deterministic).
template <typename T>
void backward_rows(const T* dy, const T* x, const T* bias, T* dx, float* dbias, int64_t n,
                   int64_t c) {
  // Summed even without dbias: a conditional store would stop vectorisation.
  const int64_t chunks = cpu::reduction_chunks(n);
  std::vector<float> partial(size_t(chunks * c), 0.f);  // [chunks, C]
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < chunks; ++k) {
    float* pb = partial.data() + k * c;
    for (int64_t r = n * k / chunks; r < n * (k + 1) / chunks; ++r) {
      const T* dyr = dy + r * c;
      const T* xr = x + r * c;
      T* dxr = dx + r * c;
#pragma omp simd
      for (int64_t j = 0; j < c; ++j) {
        const float u = cpu::to_f32(xr[j]) + cpu::to_f32(bias[j]);
        const float dgelu = cpu::gelu_grad(u);
        const float g = cpu::to_f32(dyr[j]) * dgelu;
        dxr[j] = cpu::from_f32<T>(g);
        pb[j] += g;
      }
    }
  }
  for (int64_t k = 0; dbias && k < chunks; ++k)
    for (int64_t j = 0; j < c; ++j) dbias[j] += partial[size_t(k * c + j)];
}

// Checks x [N, C] and an optional bias [C] of x's dtype; returns {N, C}.
std::pair<int64_t, int64_t> check_x_bias(const Tensor& x, const Tensor& bias, const char* k) {
  cpu::check_float_contiguous(x, k);
  MT_CHECK(x.dim() == 2, k, ": x must be [N, C], got ", x.describe());
  if (bias.defined()) {
    check_shape(bias, {x.size(1)}, "bias_gelu bias");
    check_dtype(bias, x.dtype(), "bias_gelu bias");
    check_contiguous(bias, "bias_gelu bias");
  }
  return {x.size(0), x.size(1)};
}

// The bias, or zeros [C] when there is none: one loop shape for both (a conditional load per
// element would stop vectorisation).
Tensor bias_or_zeros(const Tensor& bias, DType dtype, int64_t c) {
  return bias.defined() ? bias : Tensor::zeros({c}, dtype);
}

void check_like_x(const Tensor& t, const Tensor& x, const char* what) {
  check_shape(t, x.shape(), what);
  check_dtype(t, x.dtype(), what);
  check_contiguous(t, what);
}

}  // namespace

void bias_gelu_forward(const Tensor& x, const Tensor& bias, Tensor& y) {
  cpu::require_cpu("bias_gelu_forward", {&x, &bias, &y});
  auto [n, c] = check_x_bias(x, bias, "bias_gelu_forward x");
  check_like_x(y, x, "bias_gelu_forward y");
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  cpu::dispatch_float(x.dtype(), "bias_gelu_forward x", [&](auto tag) {
    using T = decltype(tag);
    forward_rows<T>(x.data<T>(), b.data<T>(), y.data<T>(), n, c);
  });
}

void bias_gelu_backward(const Tensor& dy, const Tensor& x, const Tensor& bias, Tensor& dx,
                        Tensor& dbias) {
  cpu::require_cpu("bias_gelu_backward", {&dy, &x, &bias, &dx, &dbias});
  auto [n, c] = check_x_bias(x, bias, "bias_gelu_backward x");
  check_like_x(dy, x, "bias_gelu_backward dy");
  check_like_x(dx, x, "bias_gelu_backward dx");
  if (dbias.defined()) {
    check_shape(dbias, {c}, "bias_gelu_backward dbias");
    check_dtype(dbias, DType::F32, "bias_gelu_backward dbias");
    check_contiguous(dbias, "bias_gelu_backward dbias");
  }
  const Tensor b = bias_or_zeros(bias, x.dtype(), c);
  cpu::dispatch_float(x.dtype(), "bias_gelu_backward x", [&](auto tag) {
    using T = decltype(tag);
    backward_rows<T>(dy.data<T>(), x.data<T>(), b.data<T>(), dx.data<T>(),
                     dbias.defined() ? dbias.data<float>() : nullptr, n, c);
  });
}

}  // namespace megatron::kernels
