#include "model/attention.h"

#include <cmath>

#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/softmax.h"

namespace megatron {

namespace {

// [b·heads, s, d] view into a buffer whose rows are positions: element (bh, i, k) lives at
// offset + bh·head_stride + i·row_stride + k.
Tensor head_view(const Tensor& buffer, int64_t offset, int64_t bh, int64_t s, int64_t d,
                 int64_t head_stride, int64_t row_stride) {
  return Tensor(buffer.storage(), buffer.offset() + offset, {bh, s, d},
                {head_stride, row_stride, 1}, buffer.dtype());
}

}  // namespace

ParallelAttention::ParallelAttention(const std::string& prefix, int layer_number,
                                     const TransformerConfig& config, const ParallelState& ps,
                                     ParameterStore& store, const ComputeWeights& weights)
    : layer_number_((config.validate(ps.tp_size), layer_number)),
      heads_local_(config.num_attention_heads / ps.tp_size),
      head_dim_(config.hidden_size / config.num_attention_heads),
      head_begin_(int64_t(ps.tp_rank) * (config.num_attention_heads / ps.tp_size)),
      dropout_p_(config.attention_dropout),
      mask_type_(config.attn_mask_type),
      query_key_value_({.name = prefix + ".query_key_value",
                        .input_size = config.hidden_size,
                        .output_size = 3 * config.hidden_size,
                        .init_std = config.init_method_std},
                       ps, store, weights),
      dense_({.name = prefix + ".dense",
              .input_size = config.hidden_size,
              .output_size = config.hidden_size,
              .input_is_parallel = true,
              .skip_bias_add = true,
              .init_std = config.output_layer_init_std()},
             ps, store, weights) {}

void ParallelAttention::init_weights(ParameterStore& store, uint64_t seed) const {
  query_key_value_.init_weights(store, seed);
  dense_.init_weights(store, seed);
}

Tensor ParallelAttention::dropped_probs(const Ctx& ctx, Arena& arena) const {
  if (!ctx.dropout_mask.defined()) return ctx.probs;
  Tensor dropped = arena.alloc(ctx.probs.shape(), ctx.probs.dtype());
  kernels::dropout_forward(ctx.probs, ctx.dropout_mask, dropout_p_, dropped);
  return dropped;
}

Tensor ParallelAttention::forward(Ctx& ctx, const Tensor& x, const Tensor& pad_mask,
                                  const DropoutScope& scope, Arena& arena, Arena& workspace) const {
  MT_CHECK(x.dim() == 3, "attention input must be [s, b, h], got ", x.describe());
  const int64_t s = x.size(0), b = x.size(1), hl = heads_local_, d = head_dim_, bh = b * hl;
  if (mask_type_ == AttnMaskType::kPadding) {
    check_shape(pad_mask, {b, s}, "attention padding mask");
    check_dtype(pad_mask, DType::U8, "attention padding mask");
  } else {
    MT_CHECK(!pad_mask.defined(), "a causal attention takes no padding mask");
  }
  ctx.pad_mask = pad_mask;
  ctx.qkv = query_key_value_.forward(ctx.qkv_linear, x, arena).view({s, b, hl, 3, d});
  const int64_t qkv_row = bh * 3 * d;  // stride of one sequence position in qkv
  Tensor q = head_view(ctx.qkv, 0, bh, s, d, 3 * d, qkv_row);  // [b·hl, s, d]
  Tensor k = head_view(ctx.qkv, d, bh, s, d, 3 * d, qkv_row);
  Tensor v = head_view(ctx.qkv, 2 * d, bh, s, d, 3 * d, qkv_row);

  Tensor scores = workspace.alloc({bh, s, s}, x.dtype());  // [b·hl, s, s]
  kernels::batched_gemm(q, false, k, true, scores);
  ctx.probs = arena.alloc({b, hl, s, s}, x.dtype());
  kernels::scaled_masked_softmax_forward(scores.view({b, hl, s, s}), 1.0f / std::sqrt(float(d)),
                                         mask_type_ == AttnMaskType::kCausal, pad_mask, ctx.probs);
  ctx.dropout_mask = Tensor();
  if (scope.enabled && dropout_p_ > 0.0f) {
    ctx.dropout_mask = arena.alloc({bh * s, s}, DType::U8);
    kernels::dropout_mask(scope.seed,
                          attention_dropout_rows(scope, layer_number_, b, head_begin_, hl, s),
                          dropout_p_, ctx.dropout_mask);
  }
  Tensor probs_dropped = dropped_probs(ctx, workspace);  // [b, hl, s, s]

  Tensor context = arena.alloc({s, b, hl * d}, x.dtype());  // [s, b, hl·d]
  Tensor context_heads = head_view(context, 0, bh, s, d, d, bh * d);
  kernels::batched_gemm(probs_dropped.view({bh, s, s}), false, v, false, context_heads);
  return dense_.forward(ctx.dense, context, arena);
}

Tensor ParallelAttention::forward_cached(const Tensor& x, LayerKv& kv, int64_t start,
                                         Arena& arena) const {
  MT_CHECK(mask_type_ == AttnMaskType::kCausal,
           "incremental decoding needs causal attention (a GPT), not a padding mask");
  MT_CHECK(x.dim() == 3, "attention input must be [s, b, h], got ", x.describe());
  const int64_t s = x.size(0), b = x.size(1), hl = heads_local_, d = head_dim_, bh = b * hl;
  MT_CHECK(kv.k.dim() == 4 && kv.k.size(0) == b && kv.k.size(1) == hl && kv.k.size(3) == d,
           "KV cache ", kv.k.describe(), " does not fit batch ", b, ", ", hl, " local heads of ",
           d);
  check_shape(kv.v, kv.k.shape(), "KV cache values");
  check_dtype(kv.k, x.dtype(), "KV cache keys");
  check_dtype(kv.v, x.dtype(), "KV cache values");
  const int64_t max_s = kv.k.size(2), sk = start + s;
  MT_CHECK(start >= 0 && sk <= max_s, "positions [", start, ", ", sk,
           ") do not fit the KV cache of ", max_s);

  ColumnParallelLinear::Ctx qkv_ctx;  // discarded: no backward
  Tensor qkv = query_key_value_.forward(qkv_ctx, x, arena).view({s, b, hl, 3, d});
  const int64_t qkv_row = bh * 3 * d;
  Tensor q = head_view(qkv, 0, bh, s, d, 3 * d, qkv_row);  // [b·hl, s, d]
  // The new keys and values go to positions [start, sk) of the cache ([b·hl, max_s, d]).
  Tensor k_new = head_view(kv.k, start * d, bh, s, d, max_s * d, d);
  Tensor v_new = head_view(kv.v, start * d, bh, s, d, max_s * d, d);
  kernels::copy(head_view(qkv, d, bh, s, d, 3 * d, qkv_row), k_new);
  kernels::copy(head_view(qkv, 2 * d, bh, s, d, 3 * d, qkv_row), v_new);
  Tensor k = head_view(kv.k, 0, bh, sk, d, max_s * d, d);  // [b·hl, sk, d]
  Tensor v = head_view(kv.v, 0, bh, sk, d, max_s * d, d);

  Tensor scores = arena.alloc({bh, s, sk}, x.dtype());
  kernels::batched_gemm(q, false, k, true, scores);
  // Causal with Sq < Sk: query i (position start + i) sees keys j <= start + i.
  Tensor probs = arena.alloc({b, hl, s, sk}, x.dtype());
  kernels::scaled_masked_softmax_forward(scores.view({b, hl, s, sk}), 1.0f / std::sqrt(float(d)),
                                         true, Tensor(), probs);
  Tensor context = arena.alloc({s, b, hl * d}, x.dtype());  // [s, b, hl·d]
  Tensor context_heads = head_view(context, 0, bh, s, d, d, bh * d);
  kernels::batched_gemm(probs.view({bh, s, sk}), false, v, false, context_heads);
  RowParallelLinear::Ctx dense_ctx;
  return dense_.forward(dense_ctx, context, arena);
}

Tensor ParallelAttention::backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const {
  const int64_t s = ctx.qkv.size(0), b = ctx.qkv.size(1), hl = heads_local_, d = head_dim_,
                bh = b * hl;
  const int64_t qkv_row = bh * 3 * d;
  Tensor q = head_view(ctx.qkv, 0, bh, s, d, 3 * d, qkv_row);
  Tensor k = head_view(ctx.qkv, d, bh, s, d, 3 * d, qkv_row);
  Tensor v = head_view(ctx.qkv, 2 * d, bh, s, d, 3 * d, qkv_row);

  Tensor dcontext = dense_.backward(ctx.dense, dout, arena);  // [s, b, hl·d]
  Tensor dcontext_heads = head_view(dcontext, 0, bh, s, d, d, bh * d);
  // dqkv is fully written by the three GEMMs below (dQ, dK, dV views tile it).
  Tensor dqkv = arena.alloc({s, b, hl, 3, d}, dout.dtype());
  Tensor dq = head_view(dqkv, 0, bh, s, d, 3 * d, qkv_row);
  Tensor dk = head_view(dqkv, d, bh, s, d, 3 * d, qkv_row);
  Tensor dv = head_view(dqkv, 2 * d, bh, s, d, 3 * d, qkv_row);

  Tensor probs_dropped = dropped_probs(ctx, arena);
  kernels::batched_gemm(probs_dropped.view({bh, s, s}), true, dcontext_heads, false, dv);
  Tensor dprobs = arena.alloc({b, hl, s, s}, dout.dtype());
  Tensor dprobs_heads = dprobs.view({bh, s, s});
  kernels::batched_gemm(dcontext_heads, false, v, true, dprobs_heads);
  if (ctx.dropout_mask.defined()) {
    Tensor undropped = arena.alloc({b, hl, s, s}, dout.dtype());
    kernels::dropout_backward(dprobs, ctx.dropout_mask, dropout_p_, undropped);
    dprobs = undropped;
  }
  Tensor dscores = arena.alloc({b, hl, s, s}, dout.dtype());
  kernels::scaled_masked_softmax_backward(dprobs, ctx.probs, 1.0f / std::sqrt(float(d)), dscores);
  kernels::batched_gemm(dscores.view({bh, s, s}), false, k, false, dq);
  kernels::batched_gemm(dscores.view({bh, s, s}), true, q, false, dk);
  return query_key_value_.backward(ctx.qkv_linear, dqkv.view({s, b, hl * 3 * d}), arena);
}

}  // namespace megatron
