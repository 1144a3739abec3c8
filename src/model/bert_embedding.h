// BertEmbedding: the input layer of BERT.
//   tokens, token types i32 [b, s] → (transposed to [s, b]) vocab-parallel word embedding
//   + learned position embedding (position = index in the sequence) + token-type embedding
//   → LayerNorm (post-LN / HF models only, BertConfig::embedding_layernorm) → dropout
//   → [s, b, h] in the compute dtype.
// Parameters: "embedding.word_embeddings.weight" [V_padded, h] partition 0,
// "embedding.position_embeddings.weight" [max_pos, h], "embedding.tokentype_embeddings.weight"
// [types, h] (Megatron's names), "embedding.layernorm.{weight,bias}" [h] when enabled.
// The dropout mask is keyed as GPT's embedding dropout (layer 0, DropoutSite::kEmbedding).
#pragma once

#include <memory>

#include "core/arena.h"
#include "dist/parallel_state.h"
#include "model/bert_config.h"
#include "model/layer_norm.h"
#include "parallel/random.h"
#include "parallel/vocab_parallel_embedding.h"

namespace megatron {

class BertEmbedding {
 public:
  struct Ctx {
    int64_t seq = 0, batch = 0;
    VocabParallelEmbedding::Ctx word;
    Tensor position_ids;   // i32 [s·b]
    Tensor tokentype_ids;  // i32 [s·b]
    LayerNorm::Ctx layernorm;
    Tensor dropout_mask;  // u8 [s·b, h] or undefined
  };

  BertEmbedding(const BertConfig& config, const ParallelState& ps, ParameterStore& store,
                const ComputeWeights& weights);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // tokens, token_types i32 [b, s] (ids in [0, V), types in [0, num_tokentypes)) → [s, b, h].
  Tensor forward(Ctx& ctx, const Tensor& tokens, const Tensor& token_types,
                 const DropoutScope& scope, Arena& arena) const;
  // dout [s, b, h] → accumulates the three tables' (and the LayerNorm's) gradients.
  void backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const;

  const VocabParallelEmbedding& word_embeddings() const { return word_; }

 private:
  BertConfig config_;
  const ComputeWeights& weights_;
  VocabParallelEmbedding word_;
  size_t position_index_, tokentype_index_;
  std::unique_ptr<LayerNorm> layernorm_;  // null in the pre-LN order
};

// A [b, s] tensor as a contiguous [s, b] one (activations are sequence-major).
Tensor to_seq_major(const Tensor& t, Arena& arena);

}  // namespace megatron
