// LayerNorm module: y = (x − mean) · rstd · γ + β over the hidden dimension, statistics in
// f32 (kernels::layernorm_*). γ and β are replicated, f32 in every compute dtype (the kernel
// reads the master values directly), have no weight decay, and start at γ = 1, β = 0.
// With Normalization::kRMSNorm (--normalization RMSNorm) it is RMSNorm instead: y = x · rstd · γ
// (kernels::rmsnorm_*), with γ only — the same module so that every place a model normalises
// takes either, under the same parameter names. With sequence_parallel the module normalises
// a sequence shard and its parameters are registered ParamSpec::sequence_parallel (their
// gradients summed over TP once per step).
#pragma once

#include <string>

#include "core/arena.h"
#include "model/transformer_config.h"
#include "parallel/compute_weights.h"

namespace megatron {

class LayerNorm {
 public:
  struct Ctx {
    Tensor input;       // x [N, h]
    Tensor mean, rstd;  // f32 [N] (no mean with RMSNorm)
  };

  // Registers "<name>.weight" and (LayerNorm only) "<name>.bias", [hidden] replicated.
  LayerNorm(const std::string& name, int64_t hidden, float eps, ParameterStore& store,
            const ComputeWeights& weights, Normalization kind = Normalization::kLayerNorm,
            bool sequence_parallel = false);

  void init_weights(ParameterStore& store) const;

  // x [..., h] (contiguous) → y [..., h], dtype of x.
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // dy [..., h] → dx (written when beta_dx = 0, accumulated into when beta_dx = 1, so a
  // residual-stream gradient can be summed in place); accumulates dγ (and dβ).
  void backward(const Ctx& ctx, const Tensor& dy, Tensor& dx, float beta_dx) const;

 private:
  int64_t hidden_;
  float eps_;
  Normalization kind_;
  const ComputeWeights& weights_;
  size_t weight_index_, bias_index_ = 0;
};

}  // namespace megatron
