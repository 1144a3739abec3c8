// Dropout (contract: kernels/dropout.h): argument checks, then the device's backend.
#include "kernels/dropout.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

void check_p(float p, const char* kernel) {
  MT_CHECK(p >= 0.f && p < 1.f, kernel, ": dropout probability must be in [0, 1), got ", p);
}

void check_mask(const Tensor& mask, int64_t numel, const char* what) {
  check_defined(mask, what);
  check_dtype(mask, DType::U8, what);
  check_contiguous(mask, what);
  MT_CHECK(mask.numel() == numel, what, " has ", mask.numel(), " elements, expected ", numel);
}

void check_like(const Tensor& t, const Tensor& like, const char* what) {
  check_shape(t, like.shape(), what);
  check_dtype(t, like.dtype(), what);
  check_contiguous(t, what);
}

}  // namespace

void dropout_mask(uint64_t seed, const std::vector<MaskRow>& rows, float p, Tensor& mask) {
  check_p(p, "dropout_mask");
  check_defined(mask, "dropout_mask mask");
  check_dtype(mask, DType::U8, "dropout_mask mask");
  check_contiguous(mask, "dropout_mask mask");
  MT_CHECK(mask.dim() == 2, "dropout_mask mask must be [rows, cols], got ", mask.describe());
  MT_CHECK(int64_t(rows.size()) == mask.size(0), "dropout_mask got ", rows.size(),
           " row keys for a mask of ", mask.size(0), " rows");
  const Device device = operand_device("dropout_mask", {&mask});
  MT_DISPATCH(device, dropout_mask, seed, rows, p, mask);
}

void dropout_forward(const Tensor& x, const Tensor& mask, float p, Tensor& y) {
  check_p(p, "dropout_forward");
  check_float_contiguous(x, "dropout_forward x");
  check_like(y, x, "dropout_forward y");
  check_mask(mask, x.numel(), "dropout_forward mask");
  const Device device = operand_device("dropout_forward", {&x, &mask, &y});
  MT_DISPATCH(device, dropout_forward, x, mask, p, y);
}

void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  check_p(p, "dropout_backward");
  check_float_contiguous(dy, "dropout_backward dy");
  check_like(dx, dy, "dropout_backward dx");
  check_mask(mask, dy.numel(), "dropout_backward mask");
  const Device device = operand_device("dropout_backward", {&dy, &mask, &dx});
  MT_DISPATCH(device, dropout_backward, dy, mask, p, dx);
}

void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual,
                              const Tensor& mask, float p, Tensor& y) {
  check_float_contiguous(x, "bias_dropout_add_forward x");
  MT_CHECK(x.dim() == 2, "bias_dropout_add_forward x must be [N, C], got ", x.describe());
  const int64_t c = x.size(1);
  check_like(residual, x, "bias_dropout_add_forward residual");
  check_like(y, x, "bias_dropout_add_forward y");
  if (bias.defined()) {
    check_shape(bias, {c}, "bias_dropout_add_forward bias");
    check_dtype(bias, x.dtype(), "bias_dropout_add_forward bias");
    check_contiguous(bias, "bias_dropout_add_forward bias");
  }
  if (mask.defined()) {
    check_p(p, "bias_dropout_add_forward");
    check_mask(mask, x.numel(), "bias_dropout_add_forward mask");
  }
  const Device device =
      operand_device("bias_dropout_add_forward", {&x, &bias, &residual, &mask, &y});
  MT_DISPATCH(device, bias_dropout_add_forward, x, bias, residual, mask, p, y);
}

void bias_dropout_add_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx,
                               Tensor& dbias) {
  check_float_contiguous(dy, "bias_dropout_add_backward dy");
  MT_CHECK(dy.dim() == 2, "bias_dropout_add_backward dy must be [N, C], got ", dy.describe());
  const int64_t c = dy.size(1);
  check_like(dx, dy, "bias_dropout_add_backward dx");
  if (mask.defined()) {
    check_p(p, "bias_dropout_add_backward");
    check_mask(mask, dy.numel(), "bias_dropout_add_backward mask");
  }
  if (dbias.defined()) {
    check_shape(dbias, {c}, "bias_dropout_add_backward dbias");
    check_dtype(dbias, DType::F32, "bias_dropout_add_backward dbias");
    check_contiguous(dbias, "bias_dropout_add_backward dbias");
  }
  const Device device = operand_device("bias_dropout_add_backward", {&dy, &mask, &dx, &dbias});
  MT_DISPATCH(device, bias_dropout_add_backward, dy, mask, p, dx, dbias);
}

}  // namespace megatron::kernels
