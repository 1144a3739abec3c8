#include "model/mla_projection.h"

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "parallel/local_linear.h"
#include "parallel/mappings.h"

namespace megatron {

namespace {

// A view of `base`'s storage: `offset` elements past base's first, with the given shape/strides.
Tensor strided(const Tensor& base, int64_t offset, const Shape& shape, const Shape& strides) {
  return Tensor(base.storage(), base.offset() + offset, shape, strides, base.dtype());
}

// Registers a replicated down projection "<name>.weight" [rows, hidden]: TP-partial with
// sequence parallelism (each rank multiplies its sequence shard).
size_t add_down_projection(ParameterStore& store, const std::string& name, int64_t rows,
                           int64_t hidden, bool sequence_parallel) {
  return store.add({.name = name + ".weight",
                    .full_shape = {rows, hidden},
                    .partition_dim = -1,
                    .sequence_parallel = sequence_parallel});
}

}  // namespace

MlaProjection::MlaProjection(const std::string& prefix, const TransformerConfig& config,
                             const ParallelState& ps, ParameterStore& store,
                             const ComputeWeights& weights)
    : mla_(config.arch.mla),
      hidden_(config.hidden_size),
      heads_local_(config.num_attention_heads / ps.tp_size),
      head_dim_(config.head_dim()),
      sequence_parallel_(config.sequence_parallel),
      tp_(ps.tp),
      weights_(weights),
      init_std_(config.hidden_init_std()),  // muP scales the hidden matrices
      q_down_index_(mla_.q_lora_rank > 0
                        ? add_down_projection(store, prefix + ".linear_q_down_proj",
                                              mla_.q_lora_rank, hidden_, sequence_parallel_)
                        : 0),
      kv_down_index_(add_down_projection(store, prefix + ".linear_kv_down_proj",
                                         mla_.kv_lora_rank + mla_.qk_pos_emb_head_dim, hidden_,
                                         sequence_parallel_)),
      q_norm_(mla_.q_lora_rank > 0
                  ? std::optional<LayerNorm>(std::in_place, prefix + ".q_layernorm",
                                             mla_.q_lora_rank, config.layernorm_epsilon, store,
                                             weights, transformer_norm_options(config))
                  : std::nullopt),
      kv_norm_(prefix + ".kv_layernorm", mla_.kv_lora_rank, config.layernorm_epsilon, store,
               weights, transformer_norm_options(config)),
      q_up_({.name = prefix + (q_norm_ ? ".linear_q_up_proj" : ".linear_q_proj"),
             .input_size = q_norm_ ? mla_.q_lora_rank : hidden_,
             .output_size = config.num_attention_heads * head_dim_,
             .bias = false,
             .sequence_parallel = sequence_parallel_,
             .init_std = init_std_},
            ps, store, weights),
      kv_up_({.name = prefix + ".linear_kv_up_proj",
              .input_size = mla_.kv_lora_rank,
              .output_size = config.num_attention_heads * (mla_.qk_head_dim + mla_.v_head_dim),
              .bias = false,
              .sequence_parallel = sequence_parallel_,
              .init_std = init_std_},
             ps, store, weights) {}

void MlaProjection::init_weights(ParameterStore& store, uint64_t seed) const {
  if (q_norm_) {
    init_normal(store.params()[q_down_index_], seed, init_std_);
    q_norm_->init_weights(store);
  }
  q_up_.init_weights(store, seed);
  init_normal(store.params()[kv_down_index_], seed, init_std_);
  kv_norm_.init_weights(store);
  kv_up_.init_weights(store, seed);
}

Tensor MlaProjection::forward(Ctx& ctx, const Tensor& x, Arena& arena) const {
  down(ctx, x, arena);
  return up(ctx, arena);
}

void MlaProjection::down(Ctx& ctx, const Tensor& x, Arena& arena) const {
  MT_CHECK(x.dim() == 3 && x.size(2) == hidden_, "MLA projection: input ", x.describe(),
           " must be [s, b, ", hidden_, "]");
  const int64_t sl = x.size(0), b = x.size(1), n = sl * b, r = mla_.kv_lora_rank,
                dr = mla_.qk_pos_emb_head_dim;
  ctx.input = x.view({n, hidden_});
  if (q_norm_)
    ctx.q_latent = local_linear_forward(ctx.input, weights_.weight(q_down_index_), arena);
  // [latent r | k_rope dr] per position, split into contiguous tensors.
  const Tensor down = local_linear_forward(ctx.input, weights_.weight(kv_down_index_), arena);
  ctx.kv_latent = arena.alloc({n, r}, x.dtype());
  kernels::copy(down.slice(1, 0, r), ctx.kv_latent);
  ctx.k_rope = arena.alloc({sl, b, dr}, x.dtype());
  Tensor k_rope_rows = ctx.k_rope.view({n, dr});
  kernels::copy(down.slice(1, r, r + dr), k_rope_rows);
}

Tensor MlaProjection::up(Ctx& ctx, Arena& arena) const {
  const int64_t sl = ctx.k_rope.size(0), b = ctx.k_rope.size(1), a = heads_local_, d = head_dim_,
                r = mla_.kv_lora_rank, dn = mla_.qk_head_dim, dr = mla_.qk_pos_emb_head_dim,
                dv = mla_.v_head_dim;
  Tensor q;  // [s, b, a·D]
  if (q_norm_) {
    const Tensor normed = q_norm_->forward(ctx.q_norm, ctx.q_latent, arena);
    q = q_up_.forward(ctx.q_up, normed.view({sl, b, mla_.q_lora_rank}), arena);
  } else {
    q = q_up_.forward(ctx.q_up, ctx.input.view({sl, b, hidden_}), arena);
  }
  const Tensor k_rope =
      sequence_parallel_ ? gather_first_dim(*tp_, ctx.k_rope, arena) : ctx.k_rope;  // [s, b, dr]
  const Tensor normed = kv_norm_.forward(ctx.kv_norm, ctx.kv_latent, arena);
  const Tensor kv = kv_up_.forward(ctx.kv_up, normed.view({sl, b, r}), arena);  // [s, b, a·(dn+dv)]

  const int64_t s = q.size(0), m = s * b, head = 3 * d, kv_head = dn + dv;
  Tensor qkv = arena.alloc({s, b, a, 3, d}, q.dtype());
  if (dv < d) kernels::fill(qkv, 0.0f);  // V's padding channels
  const Shape qkv_strides = {a * head, head, 1};
  Tensor q_out = strided(qkv, 0, {m, a, d}, qkv_strides);
  Tensor k_content = strided(qkv, d, {m, a, dn}, qkv_strides);
  Tensor k_pe = strided(qkv, d + dn, {m, a, dr}, qkv_strides);
  Tensor v_out = strided(qkv, 2 * d, {m, a, dv}, qkv_strides);
  kernels::copy(q.view({m, a, d}), q_out);
  kernels::copy(strided(kv, 0, {m, a, dn}, {a * kv_head, kv_head, 1}), k_content);
  kernels::copy(strided(k_rope, 0, {m, a, dr}, {dr, 0, 1}), k_pe);  // the one k_rope per head
  kernels::copy(strided(kv, dn, {m, a, dv}, {a * kv_head, kv_head, 1}), v_out);
  return qkv;
}

Tensor MlaProjection::backward(const Ctx& ctx, const Tensor& dqkv, Arena& arena) const {
  const int64_t s = dqkv.size(0), b = dqkv.size(1), m = s * b, a = heads_local_, d = head_dim_,
                r = mla_.kv_lora_rank, dn = mla_.qk_head_dim, dr = mla_.qk_pos_emb_head_dim,
                dv = mla_.v_head_dim, head = 3 * d, kv_head = dn + dv, n = ctx.input.size(0);
  const DType dtype = dqkv.dtype();
  const Shape qkv_strides = {a * head, head, 1};

  // Queries → dx (this rank's positions, whole over TP: the up projection reduced its dx).
  Tensor dq = arena.alloc({s, b, a * d}, dtype);
  Tensor dq_heads = dq.view({m, a, d});
  kernels::copy(strided(dqkv, 0, {m, a, d}, qkv_strides), dq_heads);
  Tensor dx;  // [n, h]
  if (q_norm_) {
    const Tensor dnormed = q_up_.backward(ctx.q_up, dq, arena);  // [s_l, b, rq]
    Tensor dlatent = arena.alloc({n, mla_.q_lora_rank}, dtype);
    q_norm_->backward(ctx.q_norm, dnormed.view({n, mla_.q_lora_rank}), dlatent, 0.0f);
    dx = local_linear_backward(dlatent, ctx.input, weights_.weight(q_down_index_),
                               weights_.grad(q_down_index_), arena);
  } else {
    dx = q_up_.backward(ctx.q_up, dq, arena).view({n, hidden_});
  }

  // Key contents and values → the latent's gradient.
  Tensor dkv = arena.alloc({s, b, a * kv_head}, dtype);
  Tensor dk_content = strided(dkv, 0, {m, a, dn}, {a * kv_head, kv_head, 1});
  Tensor dv_heads = strided(dkv, dn, {m, a, dv}, {a * kv_head, kv_head, 1});
  kernels::copy(strided(dqkv, d, {m, a, dn}, qkv_strides), dk_content);
  kernels::copy(strided(dqkv, 2 * d, {m, a, dv}, qkv_strides), dv_heads);
  const Tensor dnormed = kv_up_.backward(ctx.kv_up, dkv, arena);  // [s_l, b, r]
  Tensor ddown = arena.alloc({n, r + dr}, dtype);
  Tensor dlatent = arena.alloc({n, r}, dtype);
  kv_norm_.backward(ctx.kv_norm, dnormed.view({n, r}), dlatent, 0.0f);
  Tensor ddown_latent = ddown.slice(1, 0, r);
  kernels::copy(dlatent, ddown_latent);

  // The shared rope key: the sum over this rank's heads (one GEMM with a ones row per
  // position), then over the TP group's heads.
  Tensor ones = arena.alloc({a}, dtype);
  kernels::fill(ones, 1.0f);
  Tensor dk_rope = arena.alloc({s, b, dr}, dtype);
  Tensor dk_rope_rows = dk_rope.view({m, 1, dr});
  kernels::batched_gemm(strided(ones, 0, {m, 1, a}, {0, a, 1}), false,
                        strided(dqkv, d + dn, {m, a, dr}, qkv_strides), false, dk_rope_rows);
  if (sequence_parallel_)
    dk_rope = reduce_scatter_first_dim(*tp_, dk_rope, arena);  // [s_l, b, dr]
  else
    tp_->all_reduce(dk_rope);
  Tensor ddown_rope = ddown.slice(1, r, r + dr);
  kernels::copy(dk_rope.view({n, dr}), ddown_rope);
  const Tensor dx_kv = local_linear_backward(ddown, ctx.input, weights_.weight(kv_down_index_),
                                             weights_.grad(kv_down_index_), arena);
  kernels::axpy(1.0f, dx_kv, dx);
  return dx.view({n / b, b, hidden_});  // like x
}

}  // namespace megatron
