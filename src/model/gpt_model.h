// GptModel: GPT-2 with Megatron-LM's tensor parallelism.
//
//   tokens i32 [b, s] → (transposed to [s, b]) vocab-parallel word embedding + learned
//   position embedding → dropout → Transformer (pre-LN, causal, final LayerNorm)
//   → LM head tied to the word embedding (or an untied output layer): logits [s·b, V_padded/t]
//   f32, never gathered
//   → vocab-parallel cross-entropy (padded ids excluded) → Σ(loss·mask)/Σ(mask)
// Activations are [s, b, h] in the compute dtype; see docs/model.md for layouts, dropout
// keying, recompute and the bf16 path.
//
// Sequence parallelism (--sequence-parallel, docs/parallelism.md): the embedding's output is
// scattered to this rank's sequence shard [s/t, b, h]; the layers and the final LayerNorm run
// on the shard; the LM head all-gathers the sequence (backward: reduce-scatter). Between
// pipeline stages the activations are the shards. Training and evaluation only: inference
// (forward_step) needs a model built without it.
//
// Context parallelism (--context-parallel-size c, docs/parallelism.md): every CP rank is
// given the whole micro-batch [b, s] and keeps its two chunks of each sequence
// (parallel/context_parallel_layout.h), so its activations are [s/c, b, h] ([s/(c·t), b, h]
// with sequence parallelism); attention meets the other chunks by the layer's --cp-comm-type
// (parallel/context_parallel_attention.h); the loss sums and token counts add up over the CP group,
// so the loss is the whole sequences' on every CP rank. Training and evaluation only.
//
// Pipeline stages (DESIGN.md §3, docs/parallelism.md): a GptModel may hold one stage of the
// model — a contiguous range of layers, the embedding when it is the first stage, the final
// LayerNorm and the LM head when it is the last (StageRange). The last stage of a split
// model holds its own copy of the word embedding for the tied head (StageTie::kCopy, same
// name and init; the trainer all-reduces the two copies' gradients). A schedule drives a stage
// through forward_stage / backward_stage with one StageCtx per micro-batch in flight. The
// whole-model entry points (forward_backward, forward_loss, forward_logits, inference) need a
// model that is both first and last stage.
//
// Multi-token prediction (--mtp-num-layers N, model/multi_token_prediction.h): the last stage
// also runs the N depths on the final norm's output and scores depth k through the same LM head
// against the labels and loss mask shifted k places (Megatron's roll_tensor: the last k places
// of each sequence are not scored). Depth k's loss is Σ(loss·mask_k)/max(Σ mask_k, 1); the
// backward adds their mean over the depths × --mtp-loss-scaling-factor to the main loss (with
// the per-token loss: each depth's masked sum × Σ mask / max(Σ mask_k, 1), Megatron's
// normalisation), and stage_mtp_losses reports them. Training and evaluation (the reported LM
// loss is the main one alone); inference ignores the depths. On the last stage of a split model
// the input embedding the depths read is a copy of the first stage's (word and position tables,
// StageTie::kCopy), which the tied LM head then reads too.
//
// Knowledge distillation (model/distillation.h, set_distillation): the last stage of a whole
// model also runs a frozen teacher and the distillation losses in forward_stage, and its
// backward_stage starts from their total.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/distillation.h"
#include "model/input_embedding.h"
#include "model/kv_cache.h"
#include "model/language_model_config.h"
#include "model/multi_token_prediction.h"
#include "model/stage_context.h"
#include "model/stage_range.h"
#include "model/transformer.h"
#include "parallel/compute_weights.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace megatron {

// A loss over some tokens before normalisation: the mean is sum / count.
struct LossSum {
  double sum = 0;    // Σ loss·mask
  double count = 0;  // Σ mask
};

// GPT-2 and the Llama-family decoders: the transformer is always pre-LN and causal with a final
// LayerNorm (transformer_config() fixes those options); the Llama-family ones are `arch`.
struct GptConfig : LanguageModelConfig {
  TransformerConfig transformer_config() const;
  void validate(int tp_size) const;  // throws Error naming the offending option
};

// The tensors may live on the host or on the model's device; host tensors are uploaded in one
// transfer per call.
struct GptBatch {
  Tensor tokens;             // i32 [b, s]
  Tensor labels;             // i32 [b, s] (the next tokens), in [0, vocab_size)
  Tensor loss_mask;          // f32 [b, s]
  int64_t first_sample = 0;  // global index of row 0 (keys the dropout masks)
  int64_t iteration = 0;
};

class GptModel {
 public:
  // Registers every parameter in `store`; the caller then calls store.allocate() and
  // init_weights() (or loads a checkpoint and calls refresh_compute_weights()). The model
  // computes on the store's device: its activations live there too.
  GptModel(const GptConfig& config, const ParallelState& ps, ParameterStore& store,
           StageRange stage = {});
  ~GptModel();

  // TP-invariant init (std init_method_std; residual output projections std/√(2L); biases 0;
  // LayerNorm γ = 1, β = 0), then refresh_compute_weights().
  void init_weights(uint64_t seed);
  // Re-derives the bf16 compute copy from the fp32 master values; call after every change of
  // the store's values (optimizer step, checkpoint load). Cheap no-op for f32.
  void refresh_compute_weights();

  // One micro-batch: forward + backward with dropout. Gradients ACCUMULATE (+=) into the
  // store's grads, scaled by grad_scale. Returns Σ(loss·mask)/Σ(mask) (0 when Σ mask = 0),
  // identical on all TP ranks.
  float forward_backward(const GptBatch& batch, float grad_scale, uint64_t seed);
  // Evaluation: the same loss without dropout and without gradients.
  float forward_loss(const GptBatch& batch);
  // Evaluation over a corpus (megatron eval): the unnormalised Σ(loss·mask) and Σ(mask) of the
  // micro-batch, so that a perplexity over many micro-batches is exact. No dropout, no
  // gradients; identical on all TP ranks.
  LossSum forward_loss_sum(const GptBatch& batch);

  // ---- One stage of a pipeline (see above) ----
  // One micro-batch's activations on this stage, in an arena of its own, so that a schedule
  // can keep several micro-batches in flight. Reusable: each forward_stage starts it afresh.
  class StageCtx;  // complete only in gpt_model.cpp (model/stage_context.h)
  using StageCtxPtr = StagePtr<StageCtx>;
  StageCtxPtr make_stage_ctx() const;
  // Drops the activations of the micro-batch last run in `ctx` (the next forward_stage would):
  // an arena that grew during the step merges its blocks now, so between steps — when the
  // memory report runs — a context holds its steady-state arena, from the first step on.
  void release_stage(StageCtx& ctx) const;
  // Forward of `batch` (host or device tensors; the first stage reads the tokens, the last the
  // labels and loss mask) through this stage. `input`: the previous stage's output [s, b, h]
  // in the compute dtype (ignored on the first stage). `train`: dropout on (keyed by `seed`
  // and the batch) and activations kept for backward_stage. Returns the output [s, b, h] for
  // the next stage; on the last stage an undefined tensor, the loss being stage_loss(ctx).
  Tensor forward_stage(StageCtx& ctx, const GptBatch& batch, const Tensor& input, bool train,
                       uint64_t seed);
  // The last stage's loss of the micro-batch: Σ(loss·mask)/Σ(mask) (0 when Σ mask = 0).
  float stage_loss(const StageCtx& ctx) const;
  // DSA (model/attention.h): the indexer losses of this stage's layers in the micro-batch, summed
  // (0 without DSA's indexer loss, or without training).
  double stage_indexer_loss(const StageCtx& ctx) const;
  // The same before normalisation: Σ(loss·mask) and Σ(mask).
  LossSum stage_loss_sum(const StageCtx& ctx) const;
  // The router losses of this stage's MoE layers in the last forward_stage (training only),
  // the MTP depths' included.
  MoeLosses stage_moe_losses(const StageCtx& ctx) const;
  // Multi-token prediction: the last stage's loss of each depth in the micro-batch,
  // Σ(loss·mask_k)/Σ(mask_k) (0 when Σ mask_k = 0), what Megatron logs as `mtp_k loss`. Empty
  // without MTP.
  std::vector<double> stage_mtp_losses(const StageCtx& ctx) const;
  // With distillation (set_distillation): the last stage's loss terms of the micro-batch
  // (masked sums; the mean divides by stage_loss_sum's count). The backward starts from their
  // total, not from the LM loss alone.
  const DistillationLossTerms& stage_distillation(const StageCtx& ctx) const;
  // Knowledge distillation (model/distillation.h) on this model's last stage: its forward_stage
  // also runs the teacher and the distillation losses. Null: none. Not owned; it must outlive
  // the model's use. The whole model only (no pipeline split), no context parallelism.
  void set_distillation(Distillation* distillation);
  // Backward of the micro-batch forward_stage ran in `ctx` (with train). `grad_output`: the
  // next stage's input gradient [s, b, h] (ignored on the last stage, where the loss scaled by
  // grad_scale starts the backward). Accumulates the stage's parameter gradients; returns the
  // gradient of `input` [s, b, h] in ctx's arena (undefined on the first stage).
  Tensor backward_stage(StageCtx& ctx, const Tensor& grad_output, float grad_scale);
  // Peak bytes of a stage context's arena: one micro-batch's activations on this stage
  // (what plan/activation_memory.h predicts per stage context).
  size_t stage_activation_bytes(const StageCtx& ctx) const;
  const StageRange& stage() const { return stage_; }
  // Shape and dtype of the activations passed between stages: [seq_length, micro_batch, h],
  // [seq_length/t, micro_batch, h] with sequence parallelism.
  Shape stage_activation_shape(int64_t micro_batch) const;
  DType compute_dtype() const { return weights_.dtype(); }
  Device device() const { return store_.device(); }
  // Full-vocabulary logits f32 [b, s, vocab_size] on the model's device (gathered over TP,
  // padding dropped), no dropout. tokens i32 [b, s'] with s' <= max_position_embeddings.
  Tensor forward_logits(const Tensor& tokens);
  // The whole model's forward for a frozen use (a distillation teacher): no dropout, nothing
  // kept for a backward. `hidden`: the final norm's output [s, b, h] ([s/t, b, h] with
  // sequence parallelism) in the compute dtype; `logits`: this rank's vocabulary shard f32
  // [s·b, V_padded/t]. Both live in the model's arena until its next call.
  struct Outputs {
    Tensor hidden, logits;
  };
  Outputs forward_outputs(const GptBatch& batch);

  // ---- Inference (KV cache; DESIGN.md §3 "Inference") ----
  // A context for `batch` sequences of up to `max_seq` positions (<= max_position_embeddings):
  // the KV cache of this rank's heads, on the model's device, in the compute dtype.
  InferenceCtx make_inference_ctx(int64_t batch, int64_t max_seq) const;
  // Feeds tokens i32 [b, s_new] (host or device) at positions [ctx.length(), + s_new) — the
  // prompt, then one token per step — and advances the context. No dropout, no backward state.
  // Returns THIS RANK's vocabulary shard of the logits (f32, never gathered over TP; columns
  // past vocab_size are padding): of the last new position, [b, V_padded/t], or with
  // all_positions of every new position, [s_new, b, V_padded/t] (sequence-major). The result
  // lives in ctx's arena until the next step on ctx. Collective over the TP group.
  Tensor forward_step(InferenceCtx& ctx, const Tensor& tokens, bool all_positions = false);
  // Continuous batching: tokens i32 [b, s_new], row r continuing cache row slots[r] at its
  // own length (ctx.cache.length(slots[r])), b <= ctx.batch() distinct rows; advances those
  // rows. Returns the logit shards as forward_step does, [b, V_padded/t] (or
  // [s_new, b, V_padded/t]), row r's are slots[r]'s. Collective over the TP group.
  Tensor forward_rows(InferenceCtx& ctx, const std::vector<int64_t>& slots, const Tensor& tokens,
                      bool all_positions = false);
  // This rank's columns of the padded vocabulary: [vocab_start, vocab_start + V_padded/t).
  int64_t vocab_start() const;
  const ParallelState& parallel_state() const { return ps_; }

  const GptConfig& config() const { return config_; }
  // Peak activation bytes of the whole-model entry points (StageCtxs own their arenas).
  size_t activation_bytes() const {
    return arena_.high_water() + scratch_.high_water() + transformer_.norm_output_bytes();
  }

 private:
  struct Ctx;
  // The batch with its tensors on the model's device (uploaded into `arena` in one copy); on a
  // context-parallel rank, its chunks of the sequences (parallel/context_parallel_layout.h).
  GptBatch on_device(const GptBatch& batch, Arena& arena) const;
  // [Embedding →] transformer layers [→ final LayerNorm]: this stage's output [s, b, h].
  // `input` is the tokens i32 [b, s] on the first stage, else the previous stage's output.
  Tensor forward_hidden(Ctx& ctx, const Tensor& input, const DropoutScope& scope);
  // LM head: local logits f32 [s·b, V_padded/t] of the last stage's hidden [s, b, h]
  // ([s/t, b, h] with sequence parallelism); `input` keeps the head's input [s·b, h] for its
  // backward.
  Tensor head_logits(Ctx& ctx, const Tensor& hidden, Tensor& input);
  // The head's backward: dlogits f32 [s·b, V/t] (consumed) → accumulates the head weight's
  // gradient, returns the gradient of its hidden [s, b, h] ([s/t, b, h]) in ctx's arena.
  Tensor head_backward(Ctx& ctx, Tensor dlogits, const Tensor& input);
  // Multi-token prediction on the last stage: the depths' outputs through the head, scored
  // against the shifted labels (kept in ctx for the backward).
  void forward_mtp(Ctx& ctx, const GptBatch& batch, const Tensor& hidden,
                   const DropoutScope& scope);
  // Their backward: adds the gradient of the decoder's final-norm output to dhidden.
  void backward_mtp(Ctx& ctx, float grad_scale, Tensor& dhidden);
  // Embedding → transformer → local logits f32 [s·b, V_padded/t] (whole model).
  Tensor forward_to_logits(Ctx& ctx, const Tensor& tokens, const DropoutScope& scope);
  // Σ(loss·mask) and Σ(mask) of the micro-batch (kept in ctx for the backward).
  LossSum forward_loss_from_logits(Ctx& ctx, const GptBatch& batch, const Tensor& logits);
  // From the loss (last stage) or from dhidden [s, b, h] (other stages) down to the stage's
  // input: accumulates the gradients; returns the input gradient (undefined on the first).
  Tensor backward(Ctx& ctx, float grad_scale, Tensor dhidden = Tensor());
  // The word embedding the LM head reads: the first stage's, or the last stage's tied copy.
  const VocabParallelEmbedding& head_embedding() const;
  // The input embedding the MTP depths read: the first stage's, or the last stage's copy.
  const InputEmbedding& mtp_embedding() const;
  // t with sequence parallelism (the activations are [s/t, b, h]), else 1.
  int64_t sequence_shards() const;
  const InputEmbedding& embedding() const;

  GptConfig config_;
  Distillation* distillation_ = nullptr;
  ParallelState ps_;
  ParameterStore& store_;
  StageRange stage_;
  ComputeWeights weights_;
  std::optional<InputEmbedding> embedding_;               // the first stage
  std::optional<VocabParallelEmbedding> head_embedding_;  // the last stage of a split model
  // With MTP, the last stage of a split model: a copy of the input embedding (the tied head
  // reads its word table instead of head_embedding_).
  std::optional<InputEmbedding> mtp_embedding_;
  Transformer transformer_;
  std::optional<MultiTokenPrediction> mtp_;  // the last stage, with --mtp-num-layers
  // --untie-embeddings-and-output-weights: "output_layer.weight" [V_padded, h], split over
  // the vocabulary like the word embedding; otherwise the LM head is the word embedding.
  std::optional<size_t> output_layer_index_;
  const Tensor& lm_head_weight() const;  // [V_padded/t, h], compute dtype
  Tensor& lm_head_grad() const;          // f32 [V_padded/t, h]
  Arena arena_;    // activations of one micro-batch, reset at the start of each call
  Arena scratch_;  // per-layer workspace for activation recompute

  // forward_step / forward_rows on checked cache rows.
  Tensor forward_cached(InferenceCtx& ctx, const CacheRows& rows, const Tensor& host_tokens,
                        bool all_positions);
};
extern template struct StageDelete<GptModel::StageCtx>;

// Megatron's rule: round the vocabulary up to a multiple of divisible_by · tp_size.
int64_t padded_vocab_size(int64_t vocab, int make_vocab_size_divisible_by, int tp_size);

}  // namespace megatron
