// Argument checks shared by the CPU kernels (see cpu_common.h).
#include "kernels/cpu/cpu_common.h"

#include <algorithm>

namespace megatron::kernels::cpu {

void require_cpu(const char* kernel, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && t->device() != Device::CPU)
      MT_THROW(kernel, ": got a CUDA tensor ", t->describe(), ", which needs a CUDA build");
}

void check_float_contiguous(const Tensor& t, const char* what) {
  MT_CHECK(t.defined(), what, " is undefined, expected an f32 or bf16 tensor");
  MT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16, what, " has dtype ",
           dtype_name(t.dtype()), ", expected f32 or bf16");
  check_contiguous(t, what);
}

int64_t reduction_chunks(int64_t rows) {
  // 64 chunks keep 2-64 threads busy; tiny inputs get one row per chunk.
  return std::clamp<int64_t>(rows, 1, 64);
}

}  // namespace megatron::kernels::cpu
