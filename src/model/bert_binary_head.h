// BertBinaryHead: the pooler and the sentence-order-prediction (SOP) head.
//   [CLS] state c = hidden[0] [b, h] ─pooler: tanh(c Wpᵀ + bp)─→ pooled [b, h]
//   ─binary head─→ logits [b, 2] = pooled Wbᵀ + bb ─→ SOP loss = mean_b CE(logits, label)
// Everything here is replicated (the [CLS] state is identical on every TP rank) and tiny, so
// it runs in f32 from the master weights whatever the compute dtype; only the gradient that
// flows back into hidden[0] is cast to the compute dtype.
// Parameters: "pooler.dense.{weight [h, h], bias [h]}", "binary_head.{weight [2, h], bias [2]}"
// (Megatron's names; HF: bert.pooler.dense, cls.seq_relationship).
#pragma once

#include "core/arena.h"
#include "model/bert_config.h"
#include "parallel/compute_weights.h"

namespace megatron {

class BertBinaryHead {
 public:
  struct Ctx {
    Tensor cls;      // f32 [b, h]
    Tensor pooled;   // f32 [b, h]
    Tensor logits;   // f32 [b, 2]
    Tensor labels;   // i32 [b]
    Tensor row_max;  // f32 [b]
    Tensor sum_exp;  // f32 [b]
  };

  BertBinaryHead(const BertConfig& config, ParameterStore& store, const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // hidden [s, b, h] → SOP logits f32 [b, 2] (kept in ctx).
  Tensor forward(Ctx& ctx, const Tensor& hidden, Arena& arena) const;
  // labels i32 [b] in {0, 1} → mean cross-entropy over the batch.
  float loss(Ctx& ctx, const Tensor& labels, Arena& arena) const;
  // Backward of grad_scale · loss: accumulates the head's gradients and ADDS the [CLS]
  // gradient into dhidden [s, b, h] (rows of position 0).
  void backward(const Ctx& ctx, float grad_scale, Tensor& dhidden, Arena& arena) const;

 private:
  BertConfig config_;
  const ComputeWeights& weights_;
  size_t pooler_weight_, pooler_bias_, binary_weight_, binary_bias_;
};

}  // namespace megatron
