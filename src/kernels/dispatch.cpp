#include "kernels/dispatch.h"

namespace megatron::kernels {

Device operand_device(const char* kernel, std::initializer_list<const Tensor*> operands) {
  const Tensor* first = nullptr;
  for (const Tensor* t : operands) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
      continue;
    }
    MT_CHECK(t->device() == first->device(), kernel, ": operands live on different devices (",
             first->describe(), " on ", first->device().str(), ", ", t->describe(), " on ",
             t->device().str(), "); move them to one device with Tensor::to()");
  }
  const Device device = first ? first->device() : Device::CPU;
#ifndef MEGATRON_CUDA
  // Here rather than only in MT_DISPATCH, so that early-outs (empty problems) and checks that
  // read values never touch device memory either.
  if (device.is_cuda()) throw_cuda_not_built(kernel);
#endif
  return device;
}

void throw_cuda_not_built(const char* kernel) {
  MT_THROW(kernel,
           ": the operands are CUDA tensors, but this binary was built without CUDA; "
           "rebuild with -DMEGATRON_CUDA=ON (needs nvcc) or run with --device cpu");
}

void check_defined(const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), what, " is undefined");
}

void check_i32_contiguous(const Tensor& t, const char* what) {
  check_defined(t, what);
  check_dtype(t, DType::I32, what);
  check_contiguous(t, what);
}

void check_float_contiguous(const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), what, " is undefined, expected an f32 or bf16 tensor");
  MT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16, what, " has dtype ",
           dtype_name(t.dtype()), ", expected f32 or bf16");
  check_contiguous(t, what);
}

void check_bias_activation(NamedOperand x, NamedOperand bias,
                           std::initializer_list<NamedOperand> like_x, NamedOperand dbias) {
  check_float_contiguous(*x.tensor, x.name);
  MT_CHECK(x.tensor->dim() == 2, x.name, " must be [N, C], got ", x.tensor->describe());
  const int64_t c = x.tensor->size(1);
  if (bias.tensor->defined()) {
    check_shape(*bias.tensor, {c}, bias.name);
    check_dtype(*bias.tensor, x.tensor->dtype(), bias.name);
    check_contiguous(*bias.tensor, bias.name);
  }
  for (const NamedOperand& t : like_x) {
    check_shape(*t.tensor, x.tensor->shape(), t.name);
    check_dtype(*t.tensor, x.tensor->dtype(), t.name);
    check_contiguous(*t.tensor, t.name);
  }
  if (dbias.tensor && dbias.tensor->defined()) {
    check_shape(*dbias.tensor, {c}, dbias.name);
    check_dtype(*dbias.tensor, DType::F32, dbias.name);
    check_contiguous(*dbias.tensor, dbias.name);
  }
}

}  // namespace megatron::kernels
