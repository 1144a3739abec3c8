// Whole-buffer kernels (contract: kernels/elementwise.h): argument checks, then the device's
// backend (kernels::cpu:: / kernels::cuda::, see kernels/dispatch.h).
#include "kernels/elementwise.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

// Defined, contiguous, of dtype f32, bf16 or f16.
void check_any_float(const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), what, " is undefined");
  check_contiguous(t, what);
  MT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16, what,
           " has dtype ", dtype_name(t.dtype()), ", expected f32, bf16 or f16");
}

void check_f32_contiguous(const Tensor& t, const char* what) {
  check_defined(t, what);
  check_dtype(t, DType::F32, what);
  check_contiguous(t, what);
}

}  // namespace

void cast(const Tensor& src, Tensor& dst) {
  check_shape(dst, src.shape(), "cast dst");
  if (src.dtype() == DType::F64 || dst.dtype() == DType::F64) {
    MT_CHECK(src.dtype() == DType::F32 || dst.dtype() == DType::F32,
             "cast: f64 converts to and "
             "from f32 only, got ",
             src.describe(), " to ", dst.describe());
    check_contiguous(src, "cast src");
    check_contiguous(dst, "cast dst");
  } else {
    check_any_float(src, "cast src");
    check_any_float(dst, "cast dst");
  }
  const Device device = operand_device("cast", {&src, &dst});
  MT_DISPATCH(device, cast, src, dst);
}

void copy(const Tensor& src, Tensor& dst) {
  check_defined(src, "copy src");
  check_defined(dst, "copy dst");
  check_shape(dst, src.shape(), "copy dst");
  check_dtype(dst, src.dtype(), "copy dst");
  const Device device = operand_device("copy", {&src, &dst});
  MT_DISPATCH(device, copy, src, dst);
}

Tensor copy_into(Arena& arena, const Tensor& src) {
  check_defined(src, "copy_into src");
  Tensor c = arena.alloc(src.shape(), src.dtype());
  copy(src, c);
  return c;
}

void fill(Tensor& t, float value) {
  check_any_float(t, "fill tensor");
  const Device device = operand_device("fill", {&t});
  MT_DISPATCH(device, fill, t, value);
}

void scale(Tensor& t, float factor) {
  check_any_float(t, "scale tensor");
  const Device device = operand_device("scale", {&t});
  MT_DISPATCH(device, scale, t, factor);
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  check_shape(y, x.shape(), "axpy y");
  check_any_float(x, "axpy x");
  check_any_float(y, "axpy y");
  const Device device = operand_device("axpy", {&x, &y});
  MT_DISPATCH(device, axpy, alpha, x, y);
}

double sum_squares(const Tensor& t) {
  check_any_float(t, "sum_squares tensor");
  const Device device = operand_device("sum_squares", {&t});
  return MT_DISPATCH(device, sum_squares, t);
}

bool has_inf_or_nan(const Tensor& t) {
  check_any_float(t, "has_inf_or_nan tensor");
  const Device device = operand_device("has_inf_or_nan", {&t});
  return MT_DISPATCH(device, has_inf_or_nan, t);
}

int64_t count_zeros(const Tensor& t) {
  check_any_float(t, "count_zeros tensor");
  const Device device = operand_device("count_zeros", {&t});
  return MT_DISPATCH(device, count_zeros, t);
}

WeightedSum weighted_sum(const Tensor& values, const Tensor& weights) {
  check_f32_contiguous(values, "weighted_sum values");
  check_f32_contiguous(weights, "weighted_sum weights");
  check_shape(weights, values.shape(), "weighted_sum weights");
  const Device device = operand_device("weighted_sum", {&values, &weights});
  return MT_DISPATCH(device, weighted_sum, values, weights);
}

}  // namespace megatron::kernels
