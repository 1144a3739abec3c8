// BertClassifier: Megatron-LM's BERT finetuning models (the legacy Classification and
// MultipleChoice models): BERT's encoder with its pooler, and a ClassificationHead on the
// pooled [CLS] state — no MLM or sentence-order head.
//   tokens, token types i32 [n, s] → BertEncoder → pooled f32 [n, h]
//   → ClassificationHead (dropout p = hidden_dropout, linear) → logits [n/choices, classes]
//   → loss = mean over the logits' rows of cross-entropy (torch's CrossEntropyLoss)
// Classification (MNLI: 3 classes, QQP: 2): choices = 1, one row per sample. Multiple choice
// (RACE): each sample is `choices` consecutive rows ([CLS] question+option [SEP] passage
// [SEP] for each option), one score per row, softmax over a sample's rows.
//
// Pipeline stages (as BertModel's, Megatron's pre_process / post_process): a BertClassifier may
// hold one stage (StageRange) — the embedding on the first stage, a contiguous range of layers,
// and on the last the final LayerNorm, the pooler and the head. There is no tied word embedding
// (no LM head), so the stages share no parameter. A schedule (train/pipeline_chunks.h) drives
// a stage through forward_stage / backward_stage with one StageCtx per micro-batch in flight;
// the last stage's logits, labels and loss are stage_output(ctx). The whole-model entry points
// (forward_backward, forward_logits) need a classifier that is both first and last stage. With
// sequence parallelism the stages pass sequence shards [s/t, n, h] (model/bert_encoder.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/bert_config.h"
#include "model/bert_encoder.h"
#include "model/classification_head.h"
#include "model/stage_context.h"
#include "model/stage_range.h"
#include "parallel/compute_weights.h"

namespace megatron {

// One micro-batch of finetuning samples. The tensors may live on the host or on the model's
// device (host tensors are uploaded in one transfer per call).
struct ClassifierBatch {
  Tensor tokens;          // i32 [n, s], n = samples · choices
  Tensor token_types;     // i32 [n, s]
  Tensor pad_mask;        // u8 [n, s], 1 = padding (attended by no one)
  Tensor labels;          // i32 [n / choices] in [0, classes); may be undefined (no loss)
  int64_t first_row = 0;  // global index of row 0 (keys the dropout masks)
  int64_t iteration = 0;
};

struct BertClassifierConfig {
  BertConfig bert;        // the body; its binary_head is ignored (a pooler is always built)
  std::string head_name;  // "classification_head" or "multichoice_head" (Megatron's names)
  int64_t classes = 2;    // classification: outputs per row; multiple choice: choices
  bool multiple_choice = false;
};

// What the last stage computes for one micro-batch, on the model's device.
struct ClassifierOutput {
  Tensor logits;   // f32 [n/choices, classes]
  Tensor labels;   // i32 [n/choices], the batch's; undefined when it had none
  float loss = 0;  // mean cross-entropy over the rows; 0 without labels
};

class BertClassifier {
 public:
  // Registers this stage's parameters in `store`; the caller then calls store.allocate() and
  // init_weights() (or loads weights and calls refresh_compute_weights()).
  BertClassifier(const BertClassifierConfig& config, const ParallelState& ps, ParameterStore& store,
                 StageRange stage = {});
  ~BertClassifier();

  // TP-invariant init of the body (as BertModel) and of the head (normal(init_method_std)
  // weight, zero bias), then refresh_compute_weights().
  void init_weights(uint64_t seed);
  void refresh_compute_weights();

  // One micro-batch, dropout on: forward + backward; gradients of grad_scale · loss
  // ACCUMULATE (+=) into the store's grads. Returns the loss, identical on all TP ranks.
  float forward_backward(const ClassifierBatch& batch, float grad_scale, uint64_t seed);
  // No dropout, no gradients: logits f32 [n/choices, classes] on the host (labels unread).
  Tensor forward_logits(const ClassifierBatch& batch);

  // ---- One stage of a pipeline (see above) ----
  // One micro-batch's activations on this stage, in an arena of its own. Reusable: each
  // forward_stage starts it afresh.
  class StageCtx;  // complete only in bert_classifier.cpp (model/stage_context.h)
  using StageCtxPtr = StagePtr<StageCtx>;
  StageCtxPtr make_stage_ctx() const;
  // Drops the activations of the micro-batch last run in `ctx` (the next forward_stage would):
  // an arena that grew during the step merges its blocks now, so between steps a context
  // holds its steady-state arena, from the first step on.
  void release_stage(StageCtx& ctx) const;
  // Forward of `batch` through this stage. `input`: the previous stage's output [s, n, h] in
  // the compute dtype (ignored on the first stage). `train`: dropout on (keyed by `seed` and
  // the batch). Returns the output [s, n, h] ([s/t, n, h] with sequence parallelism) for the
  // next stage; on the last stage an undefined tensor, the result being stage_output(ctx).
  Tensor forward_stage(StageCtx& ctx, const ClassifierBatch& batch, const Tensor& input, bool train,
                       uint64_t seed);
  // The last stage's logits, labels and loss of the micro-batch forward_stage ran in `ctx`.
  const ClassifierOutput& stage_output(const StageCtx& ctx) const;
  // Backward of the micro-batch forward_stage ran in `ctx` (the last stage needs its labels).
  // `grad_output`: the next stage's input gradient, shaped like the output (ignored on the
  // last stage, where grad_scale · loss starts the backward). Accumulates the stage's
  // parameter gradients; returns the gradient of `input` in ctx's arena (undefined on the
  // first stage).
  Tensor backward_stage(StageCtx& ctx, const Tensor& grad_output, float grad_scale);
  const StageRange& stage() const { return encoder_.stage(); }
  // Shape of the activations passed between stages for `micro_batch` samples:
  // [seq_length, micro_batch · choices, h] ([seq_length/t, ...] with sequence parallelism).
  Shape stage_activation_shape(int64_t micro_batch) const;
  DType compute_dtype() const { return weights_.dtype(); }
  Device device() const { return store_.device(); }

  const BertClassifierConfig& config() const { return config_; }
  int64_t choices() const { return config_.multiple_choice ? config_.classes : 1; }

 private:
  void check_whole(const char* what) const;

  BertClassifierConfig config_;
  ParameterStore& store_;
  ComputeWeights weights_;
  BertEncoder encoder_;
  std::optional<ClassificationHead> head_;  // the last stage
  StageCtxPtr whole_;                       // the micro-batch of forward_backward / forward_logits
  Arena scratch_;                           // per-layer workspace for activation recompute
};
extern template struct StageDelete<BertClassifier::StageCtx>;

}  // namespace megatron
