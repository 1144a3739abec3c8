#include "model/dsa_indexer.h"

#include <cmath>

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/sparse_attention.h"
#include "parallel/local_linear.h"

namespace megatron {

namespace {

// The k_norm's options: a LayerNorm whatever --normalization says (Megatron-Core's), over
// whole-sequence keys (never a sequence shard).
NormOptions key_norm_options(const TransformerConfig& config) {
  NormOptions o = transformer_norm_options(config);
  o.kind = Normalization::kLayerNorm;
  o.sequence_parallel = false;
  return o;
}

// `dst` (f32, any strides) = src (contiguous, compute dtype) converted.
void copy_to_f32(const Tensor& src, Tensor dst, Arena& arena) {
  if (src.dtype() == DType::F32) return kernels::copy(src, dst);
  Tensor wide = arena.alloc(src.shape(), DType::F32);
  kernels::cast(src, wide);
  kernels::copy(wide, dst);
}

// f32 `t` (contiguous) in `dtype`.
Tensor in_dtype(const Tensor& t, DType dtype, Arena& arena) {
  if (dtype == DType::F32) return t;
  Tensor out = arena.alloc(t.shape(), dtype);
  kernels::cast(t, out);
  return out;
}

// [b, H, s, D] storage seen as [s, b, H, D] (the projections' layout).
Tensor heads_by_position(const Tensor& t) {
  const int64_t b = t.size(0), h = t.size(1), s = t.size(2), d = t.size(3);
  return Tensor(t.storage(), t.offset(), {s, b, h, d}, {d, h * s * d, s * d, 1}, t.dtype());
}

// [b, s, D] storage seen as [s, b, D].
Tensor keys_by_position(const Tensor& t) {
  const int64_t b = t.size(0), s = t.size(1), d = t.size(2);
  return Tensor(t.storage(), t.offset(), {s, b, d}, {d, s * d, 1}, t.dtype());
}

size_t add_replicated(ParameterStore& store, const std::string& name, int64_t rows, int64_t cols) {
  return store.add({.name = name + ".weight", .full_shape = {rows, cols}, .partition_dim = -1});
}

}  // namespace

DsaIndexer::DsaIndexer(const std::string& prefix, const TransformerConfig& config,
                       ParameterStore& store, const ComputeWeights& weights)
    : hidden_(config.hidden_size),
      q_input_(config.arch.mla.q_lora_rank > 0 ? config.arch.mla.q_lora_rank : config.hidden_size),
      heads_(config.arch.dsa.indexer_heads),
      head_dim_(config.arch.dsa.indexer_head_dim),
      relu_(config.arch.dsa.scoring_relu),
      init_std_(config.hidden_init_std()),
      weight_scale_(float(1.0 / std::sqrt(double(heads_) * double(head_dim_)))),
      rotary_{.rotary_dim = config.arch.mla.qk_pos_emb_head_dim,
              .base = config.arch.rotary_base,
              .seq_interpolation_factor = 1.0f,
              .llama3 = {},
              .yarn = config.yarn_rope(),
              .interleaved = config.arch.dsa.rope_interleaved || config.arch.rotary_interleaved},
      weights_(weights),
      wq_index_(add_replicated(store, prefix + ".linear_wq_b", heads_ * head_dim_, q_input_)),
      wk_index_(add_replicated(store, prefix + ".linear_wk", head_dim_, hidden_)),
      weights_proj_index_(add_replicated(store, prefix + ".linear_weights_proj", heads_, hidden_)),
      k_norm_(prefix + ".k_norm", head_dim_,
              config.arch.dsa.k_norm_epsilon > 0 ? config.arch.dsa.k_norm_epsilon
                                                 : config.layernorm_epsilon,
              store, weights, key_norm_options(config)) {}

void DsaIndexer::init_weights(ParameterStore& store, uint64_t seed) const {
  for (size_t index : {wq_index_, wk_index_, weights_proj_index_})
    init_normal(store.params()[index], seed, init_std_);
  k_norm_.init_weights(store);
}

Tensor DsaIndexer::forward(Ctx& ctx, const Tensor& x, const Tensor& qr, Arena& arena) const {
  MT_CHECK(x.dim() == 3 && x.size(2) == hidden_ && qr.dim() == 3 && qr.size(0) == x.size(0) &&
               qr.size(1) == x.size(1) && qr.size(2) == q_input_,
           "DSA indexer: inputs ", x.describe(), " and ", qr.describe(), " must be [s, b, ",
           hidden_, "] and [s, b, ", q_input_, "]");
  const int64_t s = x.size(0), b = x.size(1), n = s * b, h = heads_, d = head_dim_,
                dr = rotary_.rotary_dim;
  ctx.x = x.view({n, hidden_});
  ctx.qr = qr.view({n, q_input_});

  // Queries and keys, rotated in the compute dtype (Megatron's order), then f32 in the GEMMs'
  // layouts.
  Tensor q = local_linear_forward(ctx.qr, weights_.weight(wq_index_), arena);  // [N, H·D]
  Tensor q_rope = q.view({s, b, h, d}).slice(3, 0, dr);
  kernels::rotary_embedding(q_rope, 0, rotary_, false, q_rope);
  const Tensor k_lin = local_linear_forward(ctx.x, weights_.weight(wk_index_), arena);  // [N, D]
  Tensor k = k_norm_.forward(ctx.k_norm, k_lin, arena);
  Tensor k_rope = k.view({s, b, d}).slice(2, 0, dr);
  kernels::rotary_embedding(k_rope, 0, rotary_, false, k_rope);
  ctx.q = arena.alloc({b, h, s, d}, DType::F32);
  copy_to_f32(q.view({s, b, h, d}), heads_by_position(ctx.q), arena);
  ctx.k = arena.alloc({b, s, d}, DType::F32);
  copy_to_f32(k.view({s, b, d}), keys_by_position(ctx.k), arena);

  const Tensor w = local_linear_forward(ctx.x, weights_.weight(weights_proj_index_), arena);
  ctx.weights = arena.alloc({s, b, h}, DType::F32);
  copy_to_f32(w.view({s, b, h}), ctx.weights, arena);
  kernels::scale(ctx.weights, weight_scale_);

  // raw[b, (h, i), j] = q[b, h, i] · k[b, j]: one GEMM per sample, batched.
  ctx.raw = arena.alloc({b, h, s, s}, DType::F32);
  Tensor raw_rows = ctx.raw.view({b, h * s, s});
  kernels::batched_gemm(ctx.q.view({b, h * s, d}), false, ctx.k, true, raw_rows);
  Tensor scores = arena.alloc({b, s, s}, DType::F32);
  kernels::index_scores(ctx.raw, ctx.weights, relu_, scores);
  return scores;
}

void DsaIndexer::backward(const Ctx& ctx, const Tensor& dscores, Arena& arena) const {
  const int64_t b = ctx.k.size(0), s = ctx.k.size(1), n = s * b, h = heads_, d = head_dim_,
                dr = rotary_.rotary_dim;
  const DType dtype = weights_.dtype();
  Tensor draw = arena.alloc(ctx.raw.shape(), DType::F32);
  Tensor dweights = arena.alloc(ctx.weights.shape(), DType::F32);
  kernels::index_scores_backward(dscores, ctx.raw, ctx.weights, relu_, draw, dweights);
  const Tensor draw_rows = draw.view({b, h * s, s});

  // dq[b, (h, i)] = Σ_j draw · k[b, j];  dk[b, j] = Σ_(h, i) draw · q[b, h, i].
  Tensor dq_heads = arena.alloc({b, h, s, d}, DType::F32);
  Tensor dq_rows = dq_heads.view({b, h * s, d});
  kernels::batched_gemm(draw_rows, false, ctx.k, false, dq_rows);
  Tensor dk_keys = arena.alloc({b, s, d}, DType::F32);
  kernels::batched_gemm(draw_rows, true, ctx.q.view({b, h * s, d}), false, dk_keys);

  // Back to the projections' layouts, through RoPE (its inverse rotation).
  Tensor dq = arena.alloc({s, b, h, d}, DType::F32);
  kernels::copy(heads_by_position(dq_heads), dq);
  Tensor dq_rope = dq.slice(3, 0, dr);
  kernels::rotary_embedding(dq_rope, 0, rotary_, true, dq_rope);
  Tensor dk = arena.alloc({s, b, d}, DType::F32);
  kernels::copy(keys_by_position(dk_keys), dk);
  Tensor dk_rope = dk.slice(2, 0, dr);
  kernels::rotary_embedding(dk_rope, 0, rotary_, true, dk_rope);

  // The linears' and the norm's gradients; their input gradients are dropped (detached inputs).
  local_linear_backward(in_dtype(dq, dtype, arena).view({n, h * d}), ctx.qr,
                        weights_.weight(wq_index_), weights_.grad(wq_index_), arena);
  Tensor dk_lin = arena.alloc({n, d}, dtype);
  k_norm_.backward(ctx.k_norm, in_dtype(dk, dtype, arena).view({n, d}), dk_lin, 0.0f);
  local_linear_backward(dk_lin, ctx.x, weights_.weight(wk_index_), weights_.grad(wk_index_), arena);
  kernels::scale(dweights, weight_scale_);
  local_linear_backward(in_dtype(dweights, dtype, arena).view({n, h}), ctx.x,
                        weights_.weight(weights_proj_index_), weights_.grad(weights_proj_index_),
                        arena);
}

}  // namespace megatron
