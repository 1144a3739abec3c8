#include "model/qkv_projection.h"

#include "kernels/bias_add.h"
#include "kernels/elementwise.h"
#include "parallel/local_linear.h"
#include "parallel/mappings.h"

namespace megatron {

Tensor qkv_query_heads(const Tensor& qkv) {
  const int64_t s = qkv.size(0), b = qkv.size(1), g = qkv.size(2), q = qkv.size(3) - 2,
                d = qkv.size(4);
  const int64_t group = (q + 2) * d;
  return Tensor(qkv.storage(), qkv.offset(), {s, b, g, q, d},
                {b * g * group, g * group, group, d, 1}, qkv.dtype());
}

Tensor qkv_key_heads(const Tensor& qkv) {
  const int64_t s = qkv.size(0), b = qkv.size(1), g = qkv.size(2), q = qkv.size(3) - 2,
                d = qkv.size(4);
  const int64_t group = (q + 2) * d;
  return Tensor(qkv.storage(), qkv.offset() + q * d, {s, b, g, d},
                {b * g * group, g * group, group, 1}, qkv.dtype());
}

QkvProjection::QkvProjection(const std::string& name, const TransformerConfig& config,
                             const ParallelState& ps, ParameterStore& store,
                             const ComputeWeights& weights)
    : hidden_(config.hidden_size),
      head_dim_(config.head_dim()),
      bias_(config.qkv_bias()),
      sequence_parallel_(config.sequence_parallel),
      tp_(ps.tp),
      weights_(weights),
      init_std_(config.hidden_init_std()) {
  const int64_t g = config.query_groups(), q = config.num_attention_heads / g;
  const int64_t rows = g * (q + 2) * head_dim_;
  if (g % ps.tp_size == 0) {
    groups_local_ = g / ps.tp_size;
    queries_local_ = q;
    split_ = std::make_unique<ColumnParallelLinear>(
        ColumnParallelLinearConfig{.name = name,
                                   .input_size = hidden_,
                                   .output_size = rows,
                                   .bias = bias_,
                                   .sequence_parallel = config.sequence_parallel,
                                   .init_std = config.hidden_init_std()},
        ps, store, weights);
    return;
  }
  const int64_t ranks_per_group = ps.tp_size / g;  // validated: t divisible by g
  groups_local_ = 1;
  queries_local_ = q / ranks_per_group;
  const int64_t group = ps.tp_rank / ranks_per_group;
  q_row_begin_ = group * (q + 2) + (ps.tp_rank % ranks_per_group) * queries_local_;
  kv_row_begin_ = group * (q + 2) + q;
  weight_index_ = store.add({name + ".weight", {rows, hidden_}, -1});
  if (bias_) bias_index_ = store.add({name + ".bias", {rows}, -1, false});
}

void QkvProjection::init_weights(ParameterStore& store, uint64_t seed) const {
  if (split_) return split_->init_weights(store, seed);
  // The full tensor drawn element by element as in the split layout: TP-invariant.
  init_normal(store.params()[weight_index_], seed, init_std_);
  if (bias_) init_constant(store.params()[bias_index_], 0.0f);
}

void QkvProjection::gather_rows(const Tensor& full, Tensor& out) const {
  const int64_t d = head_dim_, ql = queries_local_;
  Tensor q_out = out.slice(0, 0, ql * d), kv_out = out.slice(0, ql * d, (ql + 2) * d);
  kernels::copy(full.slice(0, q_row_begin_ * d, (q_row_begin_ + ql) * d), q_out);
  kernels::copy(full.slice(0, kv_row_begin_ * d, (kv_row_begin_ + 2) * d), kv_out);
}

Tensor QkvProjection::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  const int64_t b = x.size(1), gl = groups_local_, ql = queries_local_;
  if (split_) {
    Tensor y = split_->forward(ctx.split, x, arena);  // [s, b, gl·(ql+2)·d]
    return y.view({y.size(0), b, gl, ql + 2, head_dim_});
  }
  MT_CHECK(x.size(-1) == hidden_, "QKV projection: input ", x.describe(), " must end in ", hidden_);
  const Tensor& full = weights_.weight(weight_index_);  // [g·(q+2)·d, h]
  ctx.w = arena.alloc({(ql + 2) * head_dim_, hidden_}, full.dtype());
  gather_rows(full, ctx.w);
  const Tensor x_full = TpRegionInput::forward(*tp_, x, sequence_parallel_, arena);  // [s, b, h]
  const int64_t s = x_full.size(0);
  ctx.input = x_full.view({-1, hidden_});                    // [N, h]
  Tensor y = local_linear_forward(ctx.input, ctx.w, arena);  // [N, (ql+2)·d]
  if (bias_) {
    Tensor bias = arena.alloc({(ql + 2) * head_dim_}, full.dtype());
    gather_rows(weights_.weight(bias_index_), bias);
    kernels::bias_add_forward(y, bias);
  }
  return y.view({s, b, gl, ql + 2, head_dim_});
}

Tensor QkvProjection::backward(const Ctx& ctx, const Tensor& dqkv, Arena& arena) const {
  const int64_t s = dqkv.size(0), b = dqkv.size(1), d = head_dim_, ql = queries_local_;
  if (split_) return split_->backward(ctx.split, dqkv.view({s, b, -1}), arena);
  Tensor dy = dqkv.view({s * b, (ql + 2) * d});
  // This micro-batch's gradient of the full (replicated) tensor: this rank's rows, zeros
  // elsewhere, summed over the TP group, then accumulated.
  auto reduce_into = [&](size_t index, const Tensor& local_rows) {
    Tensor& grad = weights_.grad(index);
    Tensor full = arena.alloc(grad.shape(), DType::F32);
    kernels::fill(full, 0.0f);
    Tensor q_rows = full.slice(0, q_row_begin_ * d, (q_row_begin_ + ql) * d);
    Tensor kv_rows = full.slice(0, kv_row_begin_ * d, (kv_row_begin_ + 2) * d);
    kernels::copy(local_rows.slice(0, 0, ql * d), q_rows);
    kernels::copy(local_rows.slice(0, ql * d, (ql + 2) * d), kv_rows);
    tp_->all_reduce(full);
    kernels::axpy(1.0f, full, grad);
  };
  if (bias_) {
    Tensor db = arena.alloc({(ql + 2) * d}, DType::F32);
    kernels::fill(db, 0.0f);
    kernels::bias_add_backward(dy, db);
    reduce_into(bias_index_, db);
  }
  Tensor dw = arena.alloc(ctx.w.shape(), DType::F32);
  kernels::fill(dw, 0.0f);
  Tensor dx = local_linear_backward(dy, ctx.input, ctx.w, dw, arena).view({s, b, hidden_});
  reduce_into(weight_index_, dw);
  return TpRegionInput::backward(*tp_, dx, sequence_parallel_, arena);
}

}  // namespace megatron
