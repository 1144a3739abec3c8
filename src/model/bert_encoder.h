// BertEncoder: BERT's body with Megatron-LM's tensor parallelism (Megatron's
// TransformerLanguageModel for BERT), shared by pretraining (BertModel: + MLM and SOP heads)
// and finetuning (BertClassifier: + a classification / multiple-choice head):
//   tokens, token types i32 [b, s] → InputEmbedding [s, b, h] → Transformer (bidirectional,
//   key-padding mask; pre-LN + final LayerNorm, or post-LN as the original BERT)
//   → hidden [s, b, h] (compute dtype)
//   → (with a pooler) BertPooler on [CLS] → pooled f32 [b, h]
// The caller owns the activation arenas: `arena` keeps what backward needs, `scratch` is the
// per-layer workspace of activation recompute.
//
// Pipeline stages (StageRange, as GptModel's): an encoder may hold one stage — the embedding
// when it is the first stage, a contiguous range of layers, the final LayerNorm and the pooler
// when it is the last. A later stage's input is the previous stage's hidden states [s, b, h]
// instead of the tokens; every stage needs the padding mask (the attention's key mask).
//
// Sequence parallelism (BertConfig::sequence_parallel, docs/parallelism.md), as GptModel's:
// the embedding outputs this rank's sequence shard [s/t, b, h], the layers (and the final
// LayerNorm) run on the shard, and pipeline stages pass the shards. The last stage all-gathers
// the final hidden states along the sequence before the heads, so that the MLM head's row
// gather and the pooler's [CLS] row see the whole sequence, as Megatron's BERT does. The heads
// are replicated and their input gradient is complete on every rank (the MLM head all-reduces
// it), so that gather's backward keeps this rank's chunk of the gradient (Megatron's
// gather_from_sequence_parallel_region with tensor_parallel_output_grad=False), not a
// reduce-scatter, which would sum t copies.
#pragma once

#include <memory>
#include <optional>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/bert_config.h"
#include "model/bert_pooler.h"
#include "model/input_embedding.h"
#include "model/stage_range.h"
#include "model/transformer.h"
#include "parallel/compute_weights.h"

namespace megatron {

// BERT's input layer: word + position + token-type tables (+ LayerNorm when post-LN).
InputEmbeddingConfig bert_input_embedding_config(const BertConfig& config);

class BertEncoder {
 public:
  struct Ctx {
    int64_t seq = 0, batch = 0;
    InputEmbedding::Ctx embedding;
    Transformer::Ctx transformer;
    BertPooler::Ctx pooler;
  };
  struct Output {
    Tensor hidden;  // [s, b, h] (non-last stage with sequence parallelism: [s/t, b, h])
    Tensor pooled;  // f32 [b, h]; undefined without a pooler
  };

  // Registers the stage's parameters: the embedding's (first stage), its layers' and, on the
  // last stage with_pooler, the pooler's.
  BertEncoder(const BertConfig& config, bool with_pooler, const ParallelState& ps,
              ParameterStore& store, const ComputeWeights& weights, StageRange stage = {});

  // TP-invariant init (see BertModel::init_weights).
  void init_weights(ParameterStore& store, uint64_t seed) const;

  // input: tokens i32 [b, s] on the first stage, else the previous stage's hidden states
  // [s, b, h] ([s/t, b, h] with sequence parallelism; compute dtype); token_types i32 [b, s]
  // (read by the first stage), pad_mask u8 [b, s] (1 = padding, attended by no one), all on
  // the model's device → this stage's hidden states (Output) and (last stage) pooled output.
  Output forward(Ctx& ctx, const Tensor& input, const Tensor& token_types, const Tensor& pad_mask,
                 const DropoutScope& scope, Arena& arena, Arena& scratch) const;
  // dhidden shaped like Output::hidden, in the compute dtype (consumed; may hold zeros),
  // dpooled f32 [b, h] (undefined: no gradient through the pooler) → accumulates the stage's
  // parameter gradients; returns the gradient of a later stage's input (shaped like it) in
  // `arena` (undefined on the first stage).
  Tensor backward(Ctx& ctx, Tensor dhidden, const Tensor& dpooled, Arena& arena,
                  Arena& scratch) const;

  // t with sequence parallelism (the activations between stages are [s/t, b, h]), else 1.
  int64_t sequence_shards() const;
  bool has_pooler() const { return pooler_ != nullptr; }
  // The first stage's embedding (throws Error naming the stage elsewhere).
  const InputEmbedding& embedding() const;
  const StageRange& stage() const { return stage_; }

  // The transformer's norm-output slot (--recompute-modules layernorm; Transformer).
  size_t norm_output_bytes() const { return transformer_.norm_output_bytes(); }

 private:
  int64_t hidden_size_;
  DType compute_dtype_;
  bool sequence_parallel_;
  std::shared_ptr<Communicator> tp_;
  StageRange stage_;
  std::optional<InputEmbedding> embedding_;  // the first stage
  Transformer transformer_;
  std::unique_ptr<BertPooler> pooler_;  // null without a pooler
};

}  // namespace megatron
