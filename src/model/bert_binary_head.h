// BertBinaryHead: the sentence-order-prediction (SOP) head on BERT's pooled [CLS] state
// (BertPooler):
//   pooled f32 [b, h] ─→ logits [b, 2] = pooled Wbᵀ + bb ─→ SOP loss = mean_b CE(logits, label)
// Replicated and tiny, like the pooler: f32 from the master weights on every TP rank.
// Parameters: "binary_head.{weight [2, h], bias [2]}" (Megatron's names; HF:
// cls.seq_relationship).
#pragma once

#include "core/arena.h"
#include "model/bert_config.h"
#include "parallel/compute_weights.h"

namespace megatron {

class BertBinaryHead {
 public:
  struct Ctx {
    Tensor pooled;   // f32 [b, h]
    Tensor logits;   // f32 [b, 2]
    Tensor labels;   // i32 [b]
    Tensor row_max;  // f32 [b]
    Tensor sum_exp;  // f32 [b]
  };

  BertBinaryHead(const BertConfig& config, ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // pooled f32 [b, h] → SOP logits f32 [b, 2] (kept in ctx).
  Tensor forward(Ctx& ctx, const Tensor& pooled, Arena& arena) const;
  // labels i32 [b] in {0, 1} → mean cross-entropy over the batch.
  float loss(Ctx& ctx, const Tensor& labels, Arena& arena) const;
  // Backward of grad_scale · loss: accumulates the head's gradients and returns dpooled f32
  // [b, h] in `arena`.
  Tensor backward(const Ctx& ctx, float grad_scale, Arena& arena) const;

 private:
  BertConfig config_;
  const ComputeWeights& weights_;
  size_t binary_weight_, binary_bias_;
};

}  // namespace megatron
