// BertModel: BERT with Megatron-LM's tensor parallelism (Megatron-LM's BertModel).
//
//   tokens, token types i32 [b, s] → BertEncoder (embedding, transformer, and with the binary
//   head the pooler) → hidden [s, b, h]
//   → MLM head on the masked positions only: logits [n_masked, V_padded/t] f32, never gathered
//     → vocab-parallel cross-entropy → lm loss = Σ(loss·weight)/Σ(weight)
//   → (binary head) pooled [CLS] → sentence-order logits [b, 2] → sop loss = mean CE
//   loss = lm loss + sop loss.
// Scoring only the masked rows gives exactly Megatron's loss (which scores every position and
// multiplies by the loss mask) at ~15% of the head's cost: the head is per-position. The rows
// are gathered from (and their gradients scattered back into) the hidden states by the
// embedding kernels, which are exactly a row gather and a row scatter-add.
//
// Pipeline stages (as GptModel's, DESIGN.md §3, docs/parallelism.md): a BertModel may hold one
// stage — the embedding (word + position + token type) when it is the first stage, a
// contiguous range of layers, and when it is the last the final LayerNorm, the pooler and
// binary head and the MLM head (StageRange). The last stage of a split model holds its own copy
// of the word embedding for the tied MLM head (model/tied_word_embedding.h). A schedule drives
// a stage through forward_stage / backward_stage with one StageCtx per micro-batch in flight;
// every stage reads the padding mask (attention), the first the tokens and token types, the
// last the masked rows, labels and weights and the sentence-order labels. The whole-model entry
// points (forward_backward, forward_loss, forward_logits) need a model that is both first and
// last stage. With sequence parallelism (BertConfig::sequence_parallel, model/bert_encoder.h)
// the stages pass sequence shards [s/t, b, h]; the heads see the gathered sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/bert_binary_head.h"
#include "model/bert_config.h"
#include "model/bert_encoder.h"
#include "model/bert_lm_head.h"
#include "model/stage_context.h"
#include "model/stage_range.h"
#include "parallel/compute_weights.h"

namespace megatron {

// Megatron's BERT batch. The masked positions are chosen on the host by the data layer
// (bert_masked_positions, data/bert_data_loader.h), so the model only gathers and scatters
// rows with kernels. The tensors may live on the host or on the model's device; host tensors
// are uploaded in one transfer per call.
struct BertBatch {
  Tensor tokens;             // i32 [b, s]
  Tensor token_types;        // i32 [b, s], 0 for segment A ([CLS] A [SEP]), 1 for B
  Tensor pad_mask;           // u8 [b, s], 1 = padding (attended by no one)
  Tensor masked_rows;        // i32 [n], ascending: rows pos·b + sample of the sequence-major
                             // [s·b] activations that carry MLM loss (n may be 0)
  Tensor masked_labels;      // i32 [n], MLM targets in [0, vocab)
  Tensor masked_weights;     // f32 [n], loss-mask weight of each row (1 for Megatron's masking)
  Tensor sop_labels;         // i32 [b], 1 = segments swapped (ignored without a binary head)
  int64_t first_sample = 0;  // global index of row 0 (keys the dropout masks)
  int64_t iteration = 0;
};

struct BertLosses {
  float lm = 0.0f;   // masked-LM loss
  float sop = 0.0f;  // sentence-order loss (0 without a binary head)
  float total() const { return lm + sop; }
};

struct BertOutputs {
  Tensor mlm_logits;  // f32 [b, s, vocab_size] (gathered over TP, padding dropped)
  Tensor sop_logits;  // f32 [b, 2], undefined without a binary head
};

class BertModel {
 public:
  // Registers every parameter in `store`; the caller then calls store.allocate() and
  // init_weights() (or loads weights and calls refresh_compute_weights()). The model
  // computes on the store's device: its activations live there too.
  BertModel(const BertConfig& config, const ParallelState& ps, ParameterStore& store,
            StageRange stage = {});
  ~BertModel();

  // TP-invariant init (normal(init_method_std) weights, residual output projections
  // std/√(2L), biases 0, LayerNorm γ = 1, β = 0), then refresh_compute_weights().
  void init_weights(uint64_t seed);
  // Re-derives the bf16 compute copy after every change of the master values.
  void refresh_compute_weights();

  // One micro-batch: forward + backward with dropout. Gradients of grad_scale·(lm + sop)
  // ACCUMULATE (+=) into the store's grads. Losses are identical on all TP ranks.
  BertLosses forward_backward(const BertBatch& batch, float grad_scale, uint64_t seed);
  // Evaluation: the same losses without dropout and without gradients.
  BertLosses forward_loss(const BertBatch& batch);
  // High-water bytes of the activation arenas (what `megatron plan` predicts).
  size_t activation_bytes() const {
    return arena_.high_water() + scratch_.high_water() + encoder_.norm_output_bytes();
  }
  // Logits at every position, no dropout, on the model's device. tokens, token_types i32
  // [b, s]; pad_mask u8 [b, s].
  BertOutputs forward_logits(const Tensor& tokens, const Tensor& token_types,
                             const Tensor& pad_mask);

  // ---- One stage of a pipeline (see above) ----
  // One micro-batch's activations on this stage, in an arena of its own, so that a schedule
  // can keep several micro-batches in flight. Reusable: each forward_stage starts it afresh.
  class StageCtx;  // complete only in bert_model.cpp (model/stage_context.h)
  using StageCtxPtr = StagePtr<StageCtx>;
  StageCtxPtr make_stage_ctx() const;
  // Drops the activations of the micro-batch last run in `ctx` (the next forward_stage would):
  // an arena that grew during the step merges its blocks now, so between steps — when the
  // memory report runs — a context holds its steady-state arena, from the first step on.
  void release_stage(StageCtx& ctx) const;
  // Forward of `batch` (host or device tensors) through this stage. `input`: the previous
  // stage's output [s, b, h] in the compute dtype (ignored on the first stage). `train`:
  // dropout on (keyed by `seed` and the batch) and activations kept for backward_stage.
  // Returns the output [s, b, h] (s/t with sequence parallelism) for the next stage; on the
  // last stage an undefined tensor, the losses being stage_losses(ctx).
  Tensor forward_stage(StageCtx& ctx, const BertBatch& batch, const Tensor& input, bool train,
                       uint64_t seed);
  // The last stage's losses of the micro-batch (identical on all TP ranks).
  BertLosses stage_losses(const StageCtx& ctx) const;
  // Backward of the micro-batch forward_stage ran in `ctx` (with train). `grad_output`: the
  // next stage's input gradient, shaped like the output (ignored on the last stage, where
  // grad_scale·(lm + sop) starts the backward). Accumulates the stage's parameter gradients;
  // returns the gradient of `input` (shaped like it) in ctx's arena (undefined on the first
  // stage).
  Tensor backward_stage(StageCtx& ctx, const Tensor& grad_output, float grad_scale);
  // Peak bytes of a stage context's arena: one micro-batch's activations on this stage
  // (what plan/activation_memory.h predicts per stage context).
  size_t stage_activation_bytes(const StageCtx& ctx) const;
  const StageRange& stage() const { return encoder_.stage(); }
  // Shape of the activations passed between stages: [seq_length, micro_batch, h]
  // ([seq_length/t, micro_batch, h] with sequence parallelism).
  Shape stage_activation_shape(int64_t micro_batch) const;
  DType compute_dtype() const { return weights_.dtype(); }
  Device device() const { return store_.device(); }

  const BertConfig& config() const { return config_; }

 private:
  struct Ctx;
  // The batch with its tensors on the model's device (uploaded into `arena` in one copy).
  static BertBatch on_device(const BertBatch& batch, Arena& arena);
  // This stage's encoder output: hidden states [s, b, h] and (last stage) pooled output.
  // `input` is the tokens on the first stage, else the previous stage's output.
  BertEncoder::Output forward_encoder(Ctx& ctx, const BertBatch& batch, const Tensor& input,
                                      const DropoutScope& scope);
  BertLosses forward_losses(Ctx& ctx, const BertBatch& batch, const BertEncoder::Output& encoded);
  // From the losses (last stage) or from dhidden [s, b, h] (other stages) down to the stage's
  // input: accumulates the gradients; returns the input gradient (undefined on the first).
  Tensor backward(Ctx& ctx, float grad_scale, Tensor dhidden = Tensor());
  void check_whole(const char* what) const;

  BertConfig config_;
  ParallelState ps_;
  ParameterStore& store_;
  ComputeWeights weights_;
  BertEncoder encoder_;
  std::optional<VocabParallelEmbedding> head_embedding_;  // the last stage of a split model
  std::optional<BertLmHead> lm_head_;                     // the last stage
  std::unique_ptr<BertBinaryHead> binary_head_;  // null with --bert-no-binary-head, or not last
  Arena arena_;    // activations of one micro-batch, reset at the start of each call
  Arena scratch_;  // per-layer workspace for activation recompute
};
extern template struct StageDelete<BertModel::StageCtx>;

}  // namespace megatron
