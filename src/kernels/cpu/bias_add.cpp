// Bias addition on CPU (contract: kernels/bias_add.h). Forward parallelises over rows,
// backward over columns so each column's sum runs in row order on one thread.
#include "kernels/bias_add.h"

#include "core/dtype.h"

namespace megatron::kernels {

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
void add_rows(T* y, const T* bias, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < n; ++r) {
    T* yr = y + r * c;  // [C]
    for (int64_t j = 0; j < c; ++j) store(yr[j], load(yr[j]) + load(bias[j]));
  }
}

template <typename T>
void sum_columns(const T* dy, float* dbias, int64_t n, int64_t c) {
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < c; ++j) {
    float s = 0.f;
    for (int64_t r = 0; r < n; ++r) s += load(dy[r * c + j]);
    dbias[j] += s;
  }
}

void check_rows(const Tensor& t, const char* what) {
  MT_CHECK(t.defined() && t.device() == Device::CPU, what, " must be a defined CPU tensor");
  MT_CHECK(t.dim() == 2 && t.is_contiguous(), what, " must be a contiguous [N, C] tensor, got ",
           t.describe());
}

}  // namespace

void bias_add_forward(Tensor& y, const Tensor& bias) {
  check_rows(y, "bias_add_forward: y");
  const int64_t n = y.size(0), c = y.size(1);
  check_shape(bias, {c}, "bias_add_forward: bias");
  check_dtype(bias, y.dtype(), "bias_add_forward: bias");
  if (y.dtype() == DType::F32)
    add_rows(y.data<float>(), bias.data<float>(), n, c);
  else if (y.dtype() == DType::BF16)
    add_rows(y.data<bf16>(), bias.data<bf16>(), n, c);
  else
    MT_THROW("bias_add_forward: y has dtype ", dtype_name(y.dtype()), ", expected f32 or bf16");
}

void bias_add_backward(const Tensor& dy, Tensor& dbias) {
  check_rows(dy, "bias_add_backward: dy");
  const int64_t n = dy.size(0), c = dy.size(1);
  check_shape(dbias, {c}, "bias_add_backward: dbias");
  check_dtype(dbias, DType::F32, "bias_add_backward: dbias");
  if (dy.dtype() == DType::F32)
    sum_columns(dy.data<float>(), dbias.data<float>(), n, c);
  else if (dy.dtype() == DType::BF16)
    sum_columns(dy.data<bf16>(), dbias.data<float>(), n, c);
  else
    MT_THROW("bias_add_backward: dy has dtype ", dtype_name(dy.dtype()), ", expected f32 or bf16");
}

}  // namespace megatron::kernels
