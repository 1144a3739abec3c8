// BertLmHead: the masked-LM head (Megatron-LM's BertLMHead, HF's BertLMPredictionHead).
//   x [n, h] (the final hidden states of the rows that are scored) ─dense h→h─→ +b, GeLU
//   ─→ LayerNorm ─f─→ logits [n, V_padded/t] f32 = · Eᵣᵀ + bias_r
// where E is the vocab-parallel word embedding (tied weights) and bias_r this rank's slice of
// a per-vocabulary bias. The logits stay split over the vocabulary (the vocab-parallel
// cross-entropy consumes them), so only the GeLU/LN input gradient is all-reduced (f's
// backward). dense and LayerNorm are replicated.
// Parameters: "lm_head.dense.{weight [h, h], bias [h]}", "lm_head.layernorm.{weight,bias}",
// "lm_head.bias" [V_padded] partition 0.
#pragma once

#include "core/arena.h"
#include "distributed/parallel_state.h"
#include "model/bert_config.h"
#include "model/layer_norm.h"
#include "parallel/vocab_parallel_embedding.h"

namespace megatron {

class BertLmHead {
 public:
  struct Ctx {
    Tensor input;           // x [n, h]
    Tensor pre_activation;  // x Wᵀ [n, h], before bias and GeLU
    LayerNorm::Ctx layernorm;
    Tensor normed;  // [n, h], the logits GEMM input
  };

  BertLmHead(const BertConfig& config, const ParallelState& ps, ParameterStore& store,
             const ComputeWeights& weights, const VocabParallelEmbedding& word_embeddings);

  void init_weights(ParameterStore& store, uint64_t seed) const;

  // x [n, h] (compute dtype, n ≥ 1) → local logits f32 [n, V_padded/t], bias included.
  Tensor forward(Ctx& ctx, const Tensor& x, Arena& arena) const;
  // dlogits f32 [n, V_padded/t] → dx [n, h] (compute dtype, complete on every rank).
  // Accumulates the gradients of the head and of the tied word embedding.
  Tensor backward(const Ctx& ctx, const Tensor& dlogits, Arena& arena) const;

 private:
  BertConfig config_;
  std::shared_ptr<Communicator> tp_;
  const ComputeWeights& weights_;
  const VocabParallelEmbedding& word_;
  size_t dense_weight_, dense_bias_, bias_;
  LayerNorm layernorm_;
};

}  // namespace megatron
