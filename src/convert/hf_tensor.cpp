#include "convert/hf_tensor.h"

#include "core/error.h"
#include "kernels/elementwise.h"

namespace megatron {

Tensor transposed_matrix(const Tensor& t) {
  return t.transpose(0, 1).clone();
}

Tensor hf_tensor_to_f32(const Tensor& t, const char* model_name) {
  Tensor src = t.is_contiguous() ? t : t.clone();
  Tensor out = Tensor::empty(src.shape(), DType::F32);
  if (src.dtype() == DType::F32) {
    out.copy_from(src);
  } else if (src.dtype() == DType::F64) {
    const double* s = src.data<double>();
    float* d = out.data<float>();
    for (int64_t i = 0; i < src.numel(); ++i) d[i] = float(s[i]);
  } else {
    MT_REQUIRE(src.dtype() == DType::BF16 || src.dtype() == DType::F16, "HF ", model_name,
               " tensor of dtype ", dtype_name(src.dtype()),
               " (expected a float dtype: F32, F16, BF16 or F64)");
    kernels::cast(src, out);
  }
  return out;
}

}  // namespace megatron
