// Sinkhorn expert choice (contract: kernels/moe_sinkhorn.h): argument checks, then the device's
// backend.
#include "kernels/moe_sinkhorn.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

void moe_sinkhorn_topk(const Tensor& logits, int64_t topk, Tensor& indices) {
  check_defined(logits, "moe_sinkhorn_topk logits");
  check_dtype(logits, DType::F32, "moe_sinkhorn_topk logits");
  check_contiguous(logits, "moe_sinkhorn_topk logits");
  MT_CHECK(logits.dim() == 2, "moe_sinkhorn_topk logits must be [N, E], got ", logits.describe());
  MT_CHECK(topk >= 1 && topk <= logits.size(1), "moe_sinkhorn_topk: k = ", topk, " of ",
           logits.size(1), " experts");
  check_dtype(indices, DType::I32, "moe_sinkhorn_topk indices");
  check_contiguous(indices, "moe_sinkhorn_topk indices");
  check_shape(indices, {logits.size(0), topk}, "moe_sinkhorn_topk indices");
  const Device device = operand_device("moe_sinkhorn_topk", {&logits, &indices});
  MT_DISPATCH(device, moe_sinkhorn_topk, logits, topk, indices);
}

}  // namespace megatron::kernels
