// BertPooler: BERT's pooler (Megatron-LM's Pooler, HF's BertPooler) — the [CLS] state through
// a dense layer and tanh, the input of the sentence-order head and of the finetuning heads:
//   hidden [s, b, h] ─row of position 0─→ cls [b, h] ─tanh(cls Wpᵀ + bp)─→ pooled f32 [b, h]
// Replicated and tiny (the [CLS] state is identical on every TP rank), so it runs in f32 from
// the master weights whatever the compute dtype; only the gradient that flows back into
// hidden[0] is cast to the compute dtype.
// Parameters: "pooler.dense.weight" [h, h] (normal(init_std)), "pooler.dense.bias" [h] (0)
// (Megatron's names; HF: bert.pooler.dense).
#pragma once

#include "core/arena.h"
#include "parallel/compute_weights.h"

namespace megatron {

class BertPooler {
 public:
  struct Ctx {
    Tensor cls;     // f32 [b, h]
    Tensor pooled;  // f32 [b, h]
  };

  BertPooler(int64_t hidden_size, float init_std, ParameterStore& store,
             const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // hidden [s, b, h] (compute dtype) → pooled f32 [b, h] in `arena` (kept in ctx).
  Tensor forward(Ctx& ctx, const Tensor& hidden, Arena& arena) const;
  // dpooled f32 [b, h]: accumulates the pooler's gradients and ADDS the [CLS] gradient into
  // dhidden [s, b, h] (the rows of position 0).
  void backward(const Ctx& ctx, const Tensor& dpooled, Tensor& dhidden, Arena& arena) const;

 private:
  int64_t hidden_size_;
  float init_std_;
  const ComputeWeights& weights_;
  size_t weight_, bias_;
};

}  // namespace megatron
