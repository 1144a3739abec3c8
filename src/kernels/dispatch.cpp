#include "kernels/dispatch.h"

#include <string>

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

void check_float_contiguous(const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), what, " is undefined, expected an f32 or bf16 tensor");
  MT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16, what, " has dtype ",
           dtype_name(t.dtype()), ", expected f32 or bf16");
  check_contiguous(t, what);
}

void check_bias_activation(const char* kernel, const Tensor& x, const Tensor& bias,
                           std::initializer_list<const Tensor*> like_x, const Tensor* dbias) {
  const std::string k = kernel;
  check_float_contiguous(x, (k + " x").c_str());
  MT_CHECK(x.dim() == 2, kernel, ": x must be [N, C], got ", x.describe());
  if (bias.defined()) {
    const std::string what = k + " bias";
    check_shape(bias, {x.size(1)}, what.c_str());
    check_dtype(bias, x.dtype(), what.c_str());
    check_contiguous(bias, what.c_str());
  }
  for (const Tensor* t : like_x) {
    const std::string what = k + " operand";
    check_shape(*t, x.shape(), what.c_str());
    check_dtype(*t, x.dtype(), what.c_str());
    check_contiguous(*t, what.c_str());
  }
  if (dbias && dbias->defined()) {
    const std::string what = k + " dbias";
    check_shape(*dbias, {x.size(1)}, what.c_str());
    check_dtype(*dbias, DType::F32, what.c_str());
    check_contiguous(*dbias, what.c_str());
  }
}

}  // namespace megatron::kernels
