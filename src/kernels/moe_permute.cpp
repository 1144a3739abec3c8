// MoE token permutation (contract: kernels/moe_permute.h): argument checks, then the device's
// backend.
#include "kernels/moe_permute.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

void check_index(const Tensor& t, const Shape& shape, const char* what) {
  check_defined(t, what);
  check_dtype(t, DType::I32, what);
  check_contiguous(t, what);
  check_shape(t, shape, what);
}

void check_rows(const Tensor& t, int64_t rows, int64_t h, DType dtype, const char* what) {
  check_float_contiguous(t, what);
  check_shape(t, {rows, h}, what);
  check_dtype(t, dtype, what);
}

}  // namespace

void moe_expert_counts(const Tensor& indices, int64_t num_experts, Tensor& counts) {
  MT_CHECK(indices.dim() == 2, "moe_expert_counts indices must be [N, k], got ",
           indices.describe());
  check_index(indices, indices.shape(), "moe_expert_counts indices");
  check_dtype(counts, DType::I64, "moe_expert_counts counts");
  check_shape(counts, {num_experts}, "moe_expert_counts counts");
  const Device device = operand_device("moe_expert_counts", {&indices, &counts});
  MT_DISPATCH(device, moe_expert_counts, indices, num_experts, counts);
}

void moe_assign_slots(const Tensor& indices, const Tensor& probs,
                      const std::vector<int64_t>& expert_slots, Tensor& slot_source,
                      Tensor& slot_of) {
  MT_CHECK(indices.dim() == 2, "moe_assign_slots indices must be [N, k], got ", indices.describe());
  check_index(indices, indices.shape(), "moe_assign_slots indices");
  MT_CHECK(expert_slots.size() >= 2 && expert_slots.front() == 0,
           "moe_assign_slots: expert_slots must start at 0 and have E + 1 entries");
  for (size_t e = 1; e < expert_slots.size(); ++e)
    MT_CHECK(expert_slots[e] >= expert_slots[e - 1], "moe_assign_slots: expert_slots decrease");
  check_index(slot_source, {expert_slots.back()}, "moe_assign_slots slot_source");
  check_index(slot_of, {indices.numel()}, "moe_assign_slots slot_of");
  if (probs.defined()) {
    check_dtype(probs, DType::F32, "moe_assign_slots probs");
    check_contiguous(probs, "moe_assign_slots probs");
    check_shape(probs, indices.shape(), "moe_assign_slots probs");
    operand_device("moe_assign_slots", {&indices, &probs});
  }
  const Device device = operand_device("moe_assign_slots", {&indices, &slot_source, &slot_of});
  MT_DISPATCH(device, moe_assign_slots, indices, probs, expert_slots, slot_source, slot_of);
}

void moe_permute(const Tensor& x, const Tensor& slot_source, int64_t topk, Tensor& out) {
  check_float_contiguous(x, "moe_permute x");
  MT_CHECK(x.dim() == 2, "moe_permute x must be [N, h], got ", x.describe());
  MT_CHECK(topk >= 1, "moe_permute: k = ", topk);
  check_index(slot_source, {slot_source.numel()}, "moe_permute slot_source");
  check_rows(out, slot_source.numel(), x.size(1), x.dtype(), "moe_permute out");
  const Device device = operand_device("moe_permute", {&x, &slot_source, &out});
  MT_DISPATCH(device, moe_permute, x, slot_source, topk, out);
}

void moe_permute_backward(const Tensor& dout, const Tensor& slot_of, int64_t topk, Tensor& dx) {
  check_float_contiguous(dout, "moe_permute_backward dout");
  MT_CHECK(dout.dim() == 2, "moe_permute_backward dout must be [M, h], got ", dout.describe());
  MT_CHECK(topk >= 1 && slot_of.numel() % topk == 0, "moe_permute_backward: ", slot_of.numel(),
           " pairs with k = ", topk);
  check_index(slot_of, {slot_of.numel()}, "moe_permute_backward slot_of");
  check_rows(dx, slot_of.numel() / topk, dout.size(1), dout.dtype(), "moe_permute_backward dx");
  const Device device = operand_device("moe_permute_backward", {&dout, &slot_of, &dx});
  MT_DISPATCH(device, moe_permute_backward, dout, slot_of, topk, dx);
}

void moe_unpermute(const Tensor& y, const Tensor& slot_of, const Tensor& probs, Tensor& out) {
  check_float_contiguous(y, "moe_unpermute y");
  MT_CHECK(y.dim() == 2, "moe_unpermute y must be [M, h], got ", y.describe());
  MT_CHECK(probs.dim() == 2, "moe_unpermute probs must be [N, k], got ", probs.describe());
  check_dtype(probs, DType::F32, "moe_unpermute probs");
  check_contiguous(probs, "moe_unpermute probs");
  check_index(slot_of, {probs.numel()}, "moe_unpermute slot_of");
  check_rows(out, probs.size(0), y.size(1), y.dtype(), "moe_unpermute out");
  const Device device = operand_device("moe_unpermute", {&y, &slot_of, &probs, &out});
  MT_DISPATCH(device, moe_unpermute, y, slot_of, probs, out);
}

void moe_unpermute_backward(const Tensor& dout, const Tensor& y, const Tensor& slot_source,
                            const Tensor& slot_of, const Tensor& probs, Tensor& dy,
                            Tensor& dprobs) {
  check_float_contiguous(dout, "moe_unpermute_backward dout");
  check_float_contiguous(y, "moe_unpermute_backward y");
  MT_CHECK(y.dim() == 2 && dout.dim() == 2 && probs.dim() == 2,
           "moe_unpermute_backward: dout [N, h], y [M, h] and probs [N, k] expected");
  check_dtype(probs, DType::F32, "moe_unpermute_backward probs");
  check_contiguous(probs, "moe_unpermute_backward probs");
  check_rows(dout, probs.size(0), y.size(1), y.dtype(), "moe_unpermute_backward dout");
  check_index(slot_source, {y.size(0)}, "moe_unpermute_backward slot_source");
  check_index(slot_of, {probs.numel()}, "moe_unpermute_backward slot_of");
  check_rows(dy, y.size(0), y.size(1), y.dtype(), "moe_unpermute_backward dy");
  check_dtype(dprobs, DType::F32, "moe_unpermute_backward dprobs");
  check_contiguous(dprobs, "moe_unpermute_backward dprobs");
  check_shape(dprobs, probs.shape(), "moe_unpermute_backward dprobs");
  const Device device = operand_device("moe_unpermute_backward",
                                       {&dout, &y, &slot_source, &slot_of, &probs, &dy, &dprobs});
  MT_DISPATCH(device, moe_unpermute_backward, dout, y, slot_source, slot_of, probs, dy, dprobs);
}

}  // namespace megatron::kernels
