#include "model/transformer.h"

#include "kernels/elementwise.h"

namespace megatron {

Transformer::Transformer(const TransformerConfig& config, const ParallelState& ps,
                         ParameterStore& store, const ComputeWeights& weights, LayerRange range)
    : config_(config), store_(&store) {
  config.validate(ps.tp_size);
  const int end = range.count < 0 ? config.num_layers : range.first + range.count;
  MT_CHECK(range.first >= 0 && range.first <= end && end <= config.num_layers, "layer range [",
           range.first, ", ", end, ") is outside the ", config.num_layers, " layers");
  MT_REQUIRE(!config.recompute_activations || config.recompute_method != RecomputeMethod::kBlock ||
                 config.recompute_num_layers <= end - range.first,
             "--recompute-method block --recompute-num-layers ", config.recompute_num_layers,
             " asks for more layers than the ", end - range.first,
             " of a model chunk (a pipeline stage's layers, or one virtual stage's): give at most ",
             end - range.first);
  if (config.recompute_layernorm) norm_outputs_ = std::make_shared<Arena>(store.device());
  for (int i = range.first; i < end; ++i) {
    const size_t first = store.params().size();
    layers_.push_back(
        std::make_unique<TransformerLayer>(i, config, ps, store, weights, norm_outputs_));
    layer_params_.emplace_back(first, store.params().size());
  }
  const size_t first = store.params().size();
  MT_CHECK(!range.last || end == config.num_layers, "the last stage's layer range [", range.first,
           ", ", end, ") does not end with the last of ", config.num_layers, " layers");
  if (config.final_layernorm && range.last)
    final_ln_ = std::make_unique<LayerNorm>(config.name_prefix + "final_layernorm",
                                            config.hidden_size, config.layernorm_epsilon, store,
                                            weights, transformer_norm_options(config));
  final_ln_params_ = {first, store.params().size()};
}

void Transformer::init_weights(ParameterStore& store, uint64_t seed) const {
  for (const auto& layer : layers_) layer->init_weights(store, seed);
  if (final_ln_) final_ln_->init_weights(store);
}

Tensor Transformer::forward(Ctx& ctx, const Tensor& x, const Tensor& pad_mask,
                            const DropoutScope& scope, Arena& arena, Arena& scratch) const {
  ctx.pad_mask = pad_mask;
  ctx.scope = scope;
  ctx.layers.assign(layers_.size(), {});
  ctx.layer_inputs.assign(layers_.size(), {});
  ctx.aux_loss = 0;
  ctx.moe_losses = {};
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (config_.recomputes_layer(int(i))) {
      ctx.layer_inputs[i] = h;
      scratch.reset();
      TransformerLayer::Ctx discarded;
      h = kernels::copy_into(arena,
                             layers_[i]->forward(discarded, h, pad_mask, scope, scratch, scratch));
      ctx.aux_loss += discarded.attention.indexer_loss;
      ctx.moe_losses += layers_[i]->moe_losses(discarded);
    } else {
      scratch.reset();  // the previous layer's forward temporaries are dead
      h = layers_[i]->forward(ctx.layers[i], h, pad_mask, scope, arena, scratch);
      ctx.aux_loss += ctx.layers[i].attention.indexer_loss;
      ctx.moe_losses += layers_[i]->moe_losses(ctx.layers[i]);
    }
  }
  return final_ln_ ? final_ln_->forward(ctx.final_ln, h, arena) : h;
}

Tensor Transformer::forward_cached(const Tensor& x, KvCache& cache, const CacheRows& rows,
                                   Arena& arena, Arena& scratch) const {
  MT_CHECK(cache.num_layers() == int(layers_.size()), "the KV cache has ", cache.num_layers(),
           " layers, the model ", layers_.size());
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    scratch.reset();  // the previous layer's temporaries are dead; its output was copied out
    h = kernels::copy_into(arena,
                           layers_[i]->forward_cached(h, cache.layer(int(i)), rows, scratch));
  }
  if (!final_ln_) return h;
  LayerNorm::Ctx discarded;
  return final_ln_->forward(discarded, h, arena);
}

Tensor Transformer::backward(Ctx& ctx, Tensor dy, Arena& arena, Arena& scratch) const {
  if (final_ln_) {
    Tensor dx = arena.alloc(dy.shape(), dy.dtype());
    final_ln_->backward(ctx.final_ln, dy, dx, 0.0f);
    store_->grads_accumulated(final_ln_params_.first, final_ln_params_.second);
    dy = dx;
  }
  // Each layer's backward temporaries live in the scratch arena, reset per layer, so the
  // backward adds one layer's worth of memory to the saved activations, not L layers' worth;
  // only the input gradient is copied out.
  for (size_t i = layers_.size(); i-- > 0;) {
    scratch.reset();
    TransformerLayer::Ctx recomputed;
    const bool recompute = config_.recomputes_layer(int(i));
    if (recompute)
      layers_[i]->forward(recomputed, ctx.layer_inputs[i], ctx.pad_mask, ctx.scope, scratch,
                          scratch);
    TransformerLayer::Ctx& layer_ctx = recompute ? recomputed : ctx.layers[i];
    layer_ctx.attention.indexer_grad_scale = ctx.aux_loss_grad_scale;
    dy = kernels::copy_into(arena,
                            layers_[i]->backward(layer_ctx, dy, ctx.aux_loss_grad_scale, scratch));
    store_->grads_accumulated(layer_params_[i].first, layer_params_[i].second);
  }
  return dy;
}

}  // namespace megatron
