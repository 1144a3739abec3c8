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
  return first ? first->device() : Device::CPU;
}

void throw_cuda_not_built(const char* kernel) {
  MT_THROW(kernel, ": the operands are CUDA tensors, but this binary was built without CUDA; "
                   "rebuild with -DMEGATRON_CUDA=ON (needs nvcc) or run with --device cpu");
}

}  // namespace megatron::kernels
