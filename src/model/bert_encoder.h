// BertEncoder: BERT's body with Megatron-LM's tensor parallelism (Megatron's
// TransformerLanguageModel for BERT), shared by pretraining (BertModel: + MLM and SOP heads)
// and finetuning (BertClassifier: + a classification / multiple-choice head):
//   tokens, token types i32 [b, s] → InputEmbedding [s, b, h] → Transformer (bidirectional,
//   key-padding mask; pre-LN + final LayerNorm, or post-LN as the original BERT)
//   → hidden [s, b, h] (compute dtype)
//   → (with a pooler) BertPooler on [CLS] → pooled f32 [b, h]
// The caller owns the activation arenas: `arena` keeps what backward needs, `scratch` is the
// per-layer workspace of activation recompute.
#pragma once

#include <memory>

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/bert_config.h"
#include "model/bert_pooler.h"
#include "model/input_embedding.h"
#include "model/transformer.h"
#include "parallel/compute_weights.h"

namespace megatron {

class BertEncoder {
 public:
  struct Ctx {
    int64_t seq = 0, batch = 0;
    InputEmbedding::Ctx embedding;
    Transformer::Ctx transformer;
    BertPooler::Ctx pooler;
  };
  struct Output {
    Tensor hidden;  // [s, b, h], compute dtype
    Tensor pooled;  // f32 [b, h]; undefined without a pooler
  };

  // Registers the embedding's, the layers' and (with_pooler) the pooler's parameters.
  BertEncoder(const BertConfig& config, bool with_pooler, const ParallelState& ps,
              ParameterStore& store, const ComputeWeights& weights);

  // TP-invariant init (see BertModel::init_weights).
  void init_weights(ParameterStore& store, uint64_t seed) const;

  // tokens, token_types i32 [b, s], pad_mask u8 [b, s] (1 = padding, attended by no one), all
  // on the model's device → hidden states and pooled output.
  Output forward(Ctx& ctx, const Tensor& tokens, const Tensor& token_types, const Tensor& pad_mask,
                 const DropoutScope& scope, Arena& arena, Arena& scratch) const;
  // dhidden [s, b, h] in the compute dtype (consumed; may hold zeros), dpooled f32 [b, h]
  // (undefined: no gradient through the pooler) → accumulates every parameter's gradient.
  void backward(Ctx& ctx, Tensor dhidden, const Tensor& dpooled, Arena& arena,
                Arena& scratch) const;

  bool has_pooler() const { return pooler_ != nullptr; }
  const InputEmbedding& embedding() const { return embedding_; }

 private:
  int64_t hidden_size_;
  InputEmbedding embedding_;
  Transformer transformer_;
  std::unique_ptr<BertPooler> pooler_;  // null without a pooler
};

}  // namespace megatron
