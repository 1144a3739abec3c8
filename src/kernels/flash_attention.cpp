// Fused attention (contract: kernels/flash_attention.h): argument checks, then the backend.
#include "kernels/flash_attention.h"

#include "kernels/dispatch.h"

namespace megatron::kernels {

namespace {

// The shapes every call shares; returns (s, b, G, q, d).
struct AttentionDims {
  int64_t s, b, groups, queries, head_dim;
};

AttentionDims check_qkv(const Tensor& qkv, const FlashAttentionParams& p, const char* op) {
  check_float_contiguous(qkv, "flash attention qkv");
  MT_CHECK(qkv.dim() == 5, op, ": qkv must be [s, b, groups, q + 2, d], got ", qkv.describe());
  const AttentionDims d{qkv.size(0), qkv.size(1), qkv.size(2), p.queries_per_group, qkv.size(4)};
  MT_CHECK(d.queries >= 1 && qkv.size(3) == d.queries + 2, op, ": qkv ", qkv.describe(),
           " does not hold ", d.queries, " query heads, a key and a value per group");
  if (p.pad_mask.defined()) {
    check_shape(p.pad_mask, {d.b, d.s}, "flash attention pad_mask");
    check_dtype(p.pad_mask, DType::U8, "flash attention pad_mask");
    check_contiguous(p.pad_mask, "flash attention pad_mask");
  }
  MT_CHECK(p.dropout_p >= 0.0f && p.dropout_p < 1.0f, op, ": dropout probability ", p.dropout_p,
           " is outside [0, 1)");
  if (p.dropout_p > 0.0f)
    MT_CHECK(p.dropout_rows != nullptr &&
                 int64_t(p.dropout_rows->size()) == d.b * d.groups * d.queries * d.s,
             op, ": attention dropout needs one mask row per (batch, head, query): ",
             d.b * d.groups * d.queries * d.s);
  return d;
}

void check_out_lse(const AttentionDims& d, const Tensor& qkv, const Tensor& out,
                   const Tensor& lse) {
  check_shape(out, {d.s, d.b, d.groups * d.queries * d.head_dim}, "flash attention out");
  check_dtype(out, qkv.dtype(), "flash attention out");
  check_contiguous(out, "flash attention out");
  check_shape(lse, {d.b, d.groups * d.queries, d.s}, "flash attention lse");
  check_dtype(lse, DType::F32, "flash attention lse");
  check_contiguous(lse, "flash attention lse");
}

}  // namespace

void flash_attention_forward(const Tensor& qkv, const FlashAttentionParams& params, Tensor& out,
                             Tensor& lse) {
  const AttentionDims d = check_qkv(qkv, params, "flash_attention_forward");
  check_out_lse(d, qkv, out, lse);
  const Device device =
      operand_device("flash_attention_forward", {&qkv, &params.pad_mask, &out, &lse});
  MT_DISPATCH(device, flash_attention_forward, qkv, params, out, lse);
}

void flash_attention_backward(const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& dout, const FlashAttentionParams& params,
                              Tensor& dqkv) {
  const AttentionDims d = check_qkv(qkv, params, "flash_attention_backward");
  check_out_lse(d, qkv, out, lse);
  check_shape(dout, out.shape(), "flash attention dout");
  check_dtype(dout, out.dtype(), "flash attention dout");
  check_contiguous(dout, "flash attention dout");
  check_shape(dqkv, qkv.shape(), "flash attention dqkv");
  check_dtype(dqkv, qkv.dtype(), "flash attention dqkv");
  check_contiguous(dqkv, "flash attention dqkv");
  const Device device = operand_device("flash_attention_backward",
                                       {&qkv, &out, &lse, &dout, &params.pad_mask, &dqkv});
  MT_DISPATCH(device, flash_attention_backward, qkv, out, lse, dout, params, dqkv);
}

}  // namespace megatron::kernels
