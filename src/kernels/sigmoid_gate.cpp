// The per-row sigmoid gate (contract: kernels/sigmoid_gate.h): argument checks, then the
// device's backend.
#include "kernels/sigmoid_gate.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

void check_rows(const Tensor& t, const Tensor& like, const char* what) {
  check_defined(t, what);
  check_dtype(t, like.dtype(), what);
  check_contiguous(t, what);
  check_shape(t, like.shape(), what);
}

void check_gate(const Tensor& logits, int64_t rows, const char* what) {
  check_defined(logits, what);
  check_dtype(logits, DType::F32, what);
  check_contiguous(logits, what);
  check_shape(logits, {rows}, what);
}

}  // namespace

void sigmoid_gate_forward(const Tensor& y, const Tensor& logits, Tensor& out) {
  check_defined(y, "sigmoid_gate_forward y");
  MT_CHECK(y.dim() == 2 && (y.dtype() == DType::F32 || y.dtype() == DType::BF16),
           "sigmoid_gate_forward y must be f32 or bf16 [N, C], got ", y.describe());
  check_contiguous(y, "sigmoid_gate_forward y");
  check_rows(out, y, "sigmoid_gate_forward out");
  check_gate(logits, y.size(0), "sigmoid_gate_forward logits");
  const Device device = operand_device("sigmoid_gate_forward", {&y, &logits, &out});
  MT_DISPATCH(device, sigmoid_gate_forward, y, logits, out);
}

void sigmoid_gate_backward(const Tensor& dout, const Tensor& y, const Tensor& logits, Tensor& dy,
                           Tensor& dlogits) {
  check_defined(y, "sigmoid_gate_backward y");
  MT_CHECK(y.dim() == 2 && (y.dtype() == DType::F32 || y.dtype() == DType::BF16),
           "sigmoid_gate_backward y must be f32 or bf16 [N, C], got ", y.describe());
  check_contiguous(y, "sigmoid_gate_backward y");
  check_rows(dout, y, "sigmoid_gate_backward dout");
  check_rows(dy, y, "sigmoid_gate_backward dy");
  check_gate(logits, y.size(0), "sigmoid_gate_backward logits");
  check_gate(dlogits, y.size(0), "sigmoid_gate_backward dlogits");
  const Device device =
      operand_device("sigmoid_gate_backward", {&dout, &y, &logits, &dy, &dlogits});
  MT_DISPATCH(device, sigmoid_gate_backward, dout, y, logits, dy, dlogits);
}

}  // namespace megatron::kernels
