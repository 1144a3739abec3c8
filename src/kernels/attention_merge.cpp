// Merge of partial attentions (contract: kernels/attention_merge.h): argument checks, then the
// device's backend.
#include "kernels/attention_merge.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse) {
  check_defined(out, "attention_merge: out");
  check_defined(lse, "attention_merge: lse");
  MT_CHECK(lse.dim() == 3, "attention_merge: lse must be f32 [b, H, s], got ", lse.describe());
  const int64_t b = lse.size(0), heads = lse.size(1), s = lse.size(2);
  MT_CHECK(out.dim() == 3 && out.size(0) == s && out.size(1) == b && heads > 0 &&
               out.size(2) % heads == 0,
           "attention_merge: out ", out.describe(), " is not [s, b, H·d] for lse ", lse.describe());
  MT_CHECK(out.dtype() == DType::F32 || out.dtype() == DType::BF16 || out.dtype() == DType::F16,
           "attention_merge: out has dtype ", dtype_name(out.dtype()),
           ", expected f32, bf16 or f16");
  check_dtype(lse, DType::F32, "attention_merge: lse");
  check_shape(part_out, out.shape(), "attention_merge: part_out");
  check_dtype(part_out, out.dtype(), "attention_merge: part_out");
  check_shape(part_lse, lse.shape(), "attention_merge: part_lse");
  check_dtype(part_lse, DType::F32, "attention_merge: part_lse");
  check_contiguous(out, "attention_merge: out");
  check_contiguous(lse, "attention_merge: lse");
  check_contiguous(part_out, "attention_merge: part_out");
  check_contiguous(part_lse, "attention_merge: part_lse");
  const Device device = operand_device("attention_merge", {&out, &lse, &part_out, &part_lse});
  MT_DISPATCH(device, attention_merge, out, lse, part_out, part_lse);
}

}  // namespace megatron::kernels
