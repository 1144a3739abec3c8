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
#pragma once

#include <cstdint>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/bert_binary_head.h"
#include "model/bert_config.h"
#include "model/bert_encoder.h"
#include "model/bert_lm_head.h"
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
  BertModel(const BertConfig& config, const ParallelState& ps, ParameterStore& store);
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
  size_t activation_bytes() const { return arena_.high_water() + scratch_.high_water(); }
  // Logits at every position, no dropout, on the model's device. tokens, token_types i32
  // [b, s]; pad_mask u8 [b, s].
  BertOutputs forward_logits(const Tensor& tokens, const Tensor& token_types,
                             const Tensor& pad_mask);

  const BertConfig& config() const { return config_; }

 private:
  struct Ctx;
  // The batch with its tensors on the model's device (uploaded into arena_ in one copy).
  BertBatch on_device(const BertBatch& batch);
  // The encoder's hidden states [s, b, h] and pooled output.
  BertEncoder::Output forward_encoder(Ctx& ctx, const BertBatch& batch, const DropoutScope& scope);
  BertLosses forward_losses(Ctx& ctx, const BertBatch& batch, const BertEncoder::Output& encoded);
  void backward(Ctx& ctx, float grad_scale);

  BertConfig config_;
  ParallelState ps_;
  ParameterStore& store_;
  ComputeWeights weights_;
  BertEncoder encoder_;
  BertLmHead lm_head_;
  std::unique_ptr<BertBinaryHead> binary_head_;  // null with --bert-no-binary-head
  Arena arena_;    // activations of one micro-batch, reset at the start of each call
  Arena scratch_;  // per-layer workspace for activation recompute
};

}  // namespace megatron
