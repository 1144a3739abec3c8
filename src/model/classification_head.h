// ClassificationHead: Megatron's finetuning heads on BERT's pooled [CLS] state (the legacy
// Classification and MultipleChoice models):
//   pooled f32 [n, h] ─dropout(p)─→ x ─linear─→ scores [n, outputs] = x Wᵀ + bias
//   classification (MNLI: 3, QQP: 2)  outputs = C, choices = 1: logits [n, C]
//   multiple choice (RACE)            outputs = 1, choices = k: the k rows of a question are
//                                     consecutive, logits = scores viewed as [n/k, k]
//   loss = mean over the logits' rows of cross-entropy(logits, label) (torch's CrossEntropyLoss)
// Replicated and tiny, like BertBinaryHead: f32 from the master weights on every TP rank.
// Dropout row r of the [n, h] input is keyed (iteration, first_sample + r, layer 0,
// kClassificationHead), so every TP rank draws the same mask and any TP size the same one.
// Parameters "<name>.weight" [outputs, h] (normal(init_std)), "<name>.bias" [outputs] (0);
// Megatron's names are "classification_head" and "multichoice_head".
#pragma once

#include <string>

#include "core/arena.h"
#include "parallel/compute_weights.h"
#include "parallel/random.h"

namespace megatron {

struct ClassificationHeadConfig {
  std::string name;  // parameter prefix
  int64_t hidden_size = 0;
  int64_t outputs = 0;  // scores per row
  int64_t choices = 1;  // rows per logits row (k for multiple choice; then outputs = 1)
  float dropout = 0.1f;
  float init_std = 0.02f;
};

class ClassificationHead {
 public:
  struct Ctx {
    Tensor mask;     // u8 [n, h], undefined without dropout
    Tensor input;    // f32 [n, h], after dropout
    Tensor logits;   // f32 [n/choices, classes]
    Tensor labels;   // i32 [n/choices]
    Tensor row_max;  // f32 [n/choices]
    Tensor sum_exp;  // f32 [n/choices]
  };

  ClassificationHead(const ClassificationHeadConfig& config, ParameterStore& store,
                     const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;
  int64_t classes() const { return config_.outputs * config_.choices; }

  // pooled f32 [n, h] (n divisible by choices) → logits f32 [n/choices, classes()], kept in ctx.
  Tensor forward(Ctx& ctx, const Tensor& pooled, const DropoutScope& scope, Arena& arena) const;
  // labels i32 [n/choices] in [0, classes()) → the mean cross-entropy.
  float loss(Ctx& ctx, const Tensor& labels, Arena& arena) const;
  // Backward of grad_scale · loss: accumulates the head's gradients and returns dpooled f32
  // [n, h] in `arena`.
  Tensor backward(const Ctx& ctx, float grad_scale, Arena& arena) const;

 private:
  ClassificationHeadConfig config_;
  const ComputeWeights& weights_;
  size_t weight_, bias_;
};

}  // namespace megatron
