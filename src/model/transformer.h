// Transformer: a stack of TransformerLayers and an optional final LayerNorm, with optional
// full activation recompute per layer. A pipeline stage holds a contiguous range of the layers
// (LayerRange); the final LayerNorm belongs to the model's last stage, which may hold no layer
// at all (Megatron's --account-for-loss-in-pipeline-split, model/stage_range.h). Layers
// keep their global numbers (parameter names, dropout keys), so a stage computes exactly what
// the same layers compute in the whole stack.
//
// Recompute: a recomputed layer's forward runs in a scratch arena that is reset before the
// next layer, so only its INPUT stays alive ([s, b, h]). In backward, the layer's forward is
// re-run from its saved input (same dropout keys → same masks) into the scratch arena, then
// its backward runs there. Same kernels, same inputs → bit-identical losses and gradients to
// a run without recompute. Which layers recompute: TransformerConfig::recomputes_layer — all
// of them, or with --recompute-method block the first --recompute-num-layers of this stack
// (one model chunk); the others keep their activations in `arena`.
//
// Selective recompute (--recompute-modules, TransformerConfig::recomputes_modules) is the
// layers' business (model/transformer_layer.h, attention.h, moe_layer.h): their recomputed
// regions live in `scratch` during the layer's forward and again during its backward; with
// layernorm the stack's layers share one norm-output slot (norm_output_bytes). With sequence
// parallelism every [s, b, h] below is this rank's shard [s/t, b, h].
//
// Backward: whether or not it recomputes, each layer's backward temporaries go to the scratch
// arena (reset per layer) and only the layer's input gradient is copied to `arena`. After the
// final LayerNorm's and each layer's backward, the store hears that their parameters' gradients
// are complete for the micro-batch (ParameterStore::grads_accumulated).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "model/layer_norm.h"
#include "model/transformer_layer.h"

namespace megatron {

// Layers [first, first + count) of a stack of TransformerConfig::num_layers.
struct LayerRange {
  int first = 0;
  int count = -1;    // -1: through the last layer
  bool last = true;  // the model's last stage: holds the final LayerNorm
};

class Transformer {
 public:
  struct Ctx {
    std::vector<TransformerLayer::Ctx> layers;  // per layer; empty for recomputed layers
    std::vector<Tensor> layer_inputs;           // per recomputed layer: its x [s, b, h]
    LayerNorm::Ctx final_ln;
    Tensor pad_mask;
    DropoutScope scope;
    // The gradient scale of the layers' own losses (DSA's indexer loss, model/attention.h; the
    // MoE layers' router losses, model/moe_layer.h): the main loss's, the micro-batch's
    // grad_scale, set by the model before backward.
    float aux_loss_grad_scale = 0.0f;
    // The layers' own losses of the micro-batch, summed over the layers (the forward's,
    // recomputed or not: a recomputing backward does not add them again).
    double aux_loss = 0;
    MoeLosses moe_losses;
  };

  Transformer(const TransformerConfig& config, const ParallelState& ps, ParameterStore& store,
              const ComputeWeights& weights, LayerRange range = {});

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [s, b, h] → y [s, b, h]. Saved activations go to `arena`; with recompute the layer
  // internals use `scratch`, which is reset per layer.
  Tensor forward(Ctx& ctx, const Tensor& x, const Tensor& pad_mask, const DropoutScope& scope,
                 Arena& arena, Arena& scratch) const;
  // Incremental (inference) forward over the KV cache: x [s_new, b, h], row r at positions
  // [rows.starts[r], + s_new) of cache row rows.slots[r] → y [s_new, b, h] in `arena` (after
  // the final LayerNorm). Each layer's temporaries go to `scratch`, reset per layer. Writes
  // every layer's keys and values for the new positions; the caller advances the cache.
  Tensor forward_cached(const Tensor& x, KvCache& cache, const CacheRows& rows, Arena& arena,
                        Arena& scratch) const;
  // dy [s, b, h] (consumed) → dx [s, b, h].
  Tensor backward(Ctx& ctx, Tensor dy, Arena& arena, Arena& scratch) const;
  // The norm-output slot's bytes (--recompute-modules layernorm; 0 without): activation
  // memory beside the arenas.
  size_t norm_output_bytes() const { return norm_outputs_ ? norm_outputs_->capacity() : 0; }

 private:
  TransformerConfig config_;
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::unique_ptr<LayerNorm> final_ln_;  // null without a final LayerNorm
  ParameterStore* store_;                // told when gradients are complete
  std::shared_ptr<Arena> norm_outputs_;  // the layers' norm-output slot, or null
  // Each layer's parameters and the final LayerNorm's, as [first, end) store indices.
  std::vector<std::pair<size_t, size_t>> layer_params_;
  std::pair<size_t, size_t> final_ln_params_;
};

}  // namespace megatron
