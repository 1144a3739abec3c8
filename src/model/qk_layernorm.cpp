#include "model/qk_layernorm.h"

#include "kernels/elementwise.h"
#include "model/qkv_projection.h"

namespace megatron {

namespace {

NormOptions qk_norm_options(const TransformerConfig& config) {
  NormOptions o = transformer_norm_options(config);
  o.sequence_parallel = true;  // TP-partial gradients: see the header
  return o;
}

// heads (a strided view) gathered into a contiguous buffer in `arena`.
Tensor gather(const Tensor& heads, Arena& arena) {
  Tensor out = arena.alloc(heads.shape(), heads.dtype());
  kernels::copy(heads, out);
  return out;
}

// y = norm(heads), written back into the strided view `heads`.
void normalize(const LayerNorm& norm, LayerNorm::Ctx& ctx, Tensor heads, Arena& arena) {
  const Tensor y = norm.forward(ctx, gather(heads, arena), arena);
  kernels::copy(y, heads);
}

void normalize_backward(const LayerNorm& norm, const LayerNorm::Ctx& ctx, Tensor dheads,
                        Arena& arena) {
  const Tensor dy = gather(dheads, arena);
  Tensor dx = arena.alloc(dy.shape(), dy.dtype());
  norm.backward(ctx, dy, dx, 0.0f);
  kernels::copy(dx, dheads);
}

}  // namespace

QkLayerNorm::QkLayerNorm(const std::string& prefix, const TransformerConfig& config,
                         ParameterStore& store, const ComputeWeights& weights)
    : head_dim_(config.head_dim()),
      q_norm_(prefix + ".q_layernorm", config.head_dim(), config.layernorm_epsilon, store, weights,
              qk_norm_options(config)),
      k_norm_(prefix + ".k_layernorm", config.head_dim(), config.layernorm_epsilon, store, weights,
              qk_norm_options(config)) {}

void QkLayerNorm::init_weights(ParameterStore& store) const {
  q_norm_.init_weights(store);
  k_norm_.init_weights(store);
}

void QkLayerNorm::forward(Ctx& ctx, Tensor& qkv, Arena& arena) const {
  MT_CHECK(qkv.dim() == 5 && qkv.size(4) == head_dim_, "QK LayerNorm: qkv ", qkv.describe(),
           " must be [s, b, groups, q + 2, ", head_dim_, "]");
  normalize(q_norm_, ctx.q, qkv_query_heads(qkv), arena);
  normalize(k_norm_, ctx.k, qkv_key_heads(qkv), arena);
}

void QkLayerNorm::forward_inference(Tensor& qkv, Arena& arena) const {
  Ctx discarded;
  forward(discarded, qkv, arena);
}

void QkLayerNorm::backward(const Ctx& ctx, Tensor& dqkv, Arena& arena) const {
  normalize_backward(q_norm_, ctx.q, qkv_query_heads(dqkv), arena);
  normalize_backward(k_norm_, ctx.k, qkv_key_heads(dqkv), arena);
}

}  // namespace megatron
