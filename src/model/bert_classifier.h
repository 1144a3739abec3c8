// BertClassifier: Megatron-LM's BERT finetuning models (the legacy Classification and
// MultipleChoice models): BERT's encoder with its pooler, and a ClassificationHead on the
// pooled [CLS] state — no MLM or sentence-order head.
//   tokens, token types i32 [n, s] → BertEncoder → pooled f32 [n, h]
//   → ClassificationHead (dropout p = hidden_dropout, linear) → logits [n/choices, classes]
//   → loss = mean over the logits' rows of cross-entropy (torch's CrossEntropyLoss)
// Classification (MNLI: 3 classes, QQP: 2): choices = 1, one row per sample. Multiple choice
// (RACE): each sample is `choices` consecutive rows ([CLS] question+option [SEP] passage
// [SEP] for each option), one score per row, softmax over a sample's rows.
#pragma once

#include <cstdint>
#include <string>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/bert_config.h"
#include "model/bert_encoder.h"
#include "model/classification_head.h"
#include "parallel/compute_weights.h"

namespace megatron {

// One micro-batch of finetuning samples. The tensors may live on the host or on the model's
// device (host tensors are uploaded in one transfer per call).
struct ClassifierBatch {
  Tensor tokens;          // i32 [n, s], n = samples · choices
  Tensor token_types;     // i32 [n, s]
  Tensor pad_mask;        // u8 [n, s], 1 = padding (attended by no one)
  Tensor labels;          // i32 [n / choices] in [0, classes)
  int64_t first_row = 0;  // global index of row 0 (keys the dropout masks)
  int64_t iteration = 0;
};

struct BertClassifierConfig {
  BertConfig bert;        // the body; its binary_head is ignored (a pooler is always built)
  std::string head_name;  // "classification_head" or "multichoice_head" (Megatron's names)
  int64_t classes = 2;    // classification: outputs per row; multiple choice: choices
  bool multiple_choice = false;
};

class BertClassifier {
 public:
  // Registers every parameter in `store`; the caller then calls store.allocate() and
  // init_weights() (or loads weights and calls refresh_compute_weights()).
  BertClassifier(const BertClassifierConfig& config, const ParallelState& ps,
                 ParameterStore& store);

  // TP-invariant init of the body (as BertModel) and of the head (normal(init_method_std)
  // weight, zero bias), then refresh_compute_weights().
  void init_weights(uint64_t seed);
  void refresh_compute_weights();

  // One micro-batch, dropout on: forward + backward; gradients of grad_scale · loss
  // ACCUMULATE (+=) into the store's grads. Returns the loss, identical on all TP ranks.
  float forward_backward(const ClassifierBatch& batch, float grad_scale, uint64_t seed);
  // No dropout, no gradients: logits f32 [n/choices, classes] on the host (labels unread).
  Tensor forward_logits(const ClassifierBatch& batch);

  const BertClassifierConfig& config() const { return config_; }
  int64_t choices() const { return config_.multiple_choice ? config_.classes : 1; }

 private:
  ClassifierBatch on_device(const ClassifierBatch& batch);

  BertClassifierConfig config_;
  ParameterStore& store_;
  ComputeWeights weights_;
  BertEncoder encoder_;
  ClassificationHead head_;
  Arena arena_;    // activations of one micro-batch, reset at the start of each call
  Arena scratch_;  // per-layer workspace for activation recompute
};

}  // namespace megatron
