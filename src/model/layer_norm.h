// LayerNorm module: y = (x − mean) · rstd · γ + β over the hidden dimension, statistics in
// f32 (kernels::layernorm_*). γ and β are replicated, f32 in every compute dtype (the kernel
// reads the master values directly), have no weight decay, and start at γ = 1, β = 0.
// With Normalization::kRMSNorm (--normalization RMSNorm) it is RMSNorm instead: y = x · rstd · γ
// (kernels::rmsnorm_*), with γ only — the same module so that every place a model normalises
// takes either, under the same parameter names. With sequence_parallel the module normalises
// a sequence shard and its parameters are registered ParamSpec::sequence_parallel (their
// gradients summed over TP once per step).
// With zero_centered_gamma (--apply-layernorm-1p, Nemotron's LayerNorm1P) the stored weight is
// γ − 1, starting at 0 (so that weight decay pulls the gain towards 1, not 0): the forward
// multiplies by 1 + weight, and the gradient of the stored weight is that of γ.
#pragma once

#include <string>

#include "core/arena.h"
#include "model/transformer_config.h"
#include "parallel/compute_weights.h"

namespace megatron {

struct NormOptions {
  Normalization kind = Normalization::kLayerNorm;
  bool zero_centered_gamma = false;  // --apply-layernorm-1p: the weight holds γ − 1
  bool sequence_parallel = false;    // normalises a sequence shard (see above)
};

// The options of a transformer stack's norms: its --normalization, --apply-layernorm-1p and
// --sequence-parallel.
NormOptions transformer_norm_options(const TransformerConfig& config);

class LayerNorm {
 public:
  struct Ctx {
    Tensor input;       // x [N, h]
    Tensor mean, rstd;  // f32 [N] (no mean with RMSNorm)
    Tensor gamma;       // f32 [h] 1 + weight with zero_centered_gamma, else the weight itself
  };

  // Registers "<name>.weight" and (LayerNorm only) "<name>.bias", [hidden] replicated.
  LayerNorm(const std::string& name, int64_t hidden, float eps, ParameterStore& store,
            const ComputeWeights& weights, NormOptions options = {});

  void init_weights(ParameterStore& store) const;

  // x [..., h] (contiguous) → y [..., h], dtype of x.
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // dy [..., h] → dx (written when beta_dx = 0, accumulated into when beta_dx = 1, so a
  // residual-stream gradient can be summed in place); accumulates dγ (and dβ).
  void backward(const Ctx& ctx, const Tensor& dy, Tensor& dx, float beta_dx) const;

 private:
  int64_t hidden_;
  float eps_;
  NormOptions options_;
  const ComputeWeights& weights_;
  size_t weight_index_, bias_index_ = 0;
};

}  // namespace megatron
