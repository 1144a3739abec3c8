#include "model/tied_word_embedding.h"

namespace megatron {

VocabParallelEmbeddingConfig word_embedding_config(const InputEmbeddingConfig& config) {
  return {.name = "embedding.word_embeddings",
          .num_embeddings = config.padded_vocab_size,
          .vocab_rows = config.vocab_size,
          .embedding_dim = config.hidden_size,
          .init_std = config.init_method_std};
}

std::optional<VocabParallelEmbedding> tied_word_embedding_copy(
    const InputEmbeddingConfig& embedding, const StageRange& stage, const ParallelState& ps,
    ParameterStore& store, const ComputeWeights& weights) {
  const VocabParallelEmbeddingConfig word = word_embedding_config(embedding);
  if (stage.first && !stage.last) store.set_stage_tie(word.name + ".weight", StageTie::kOriginal);
  if (!stage.last || stage.first) return std::nullopt;
  std::optional<VocabParallelEmbedding> copy(std::in_place, word, ps, store, weights);
  store.set_stage_tie(word.name + ".weight", StageTie::kCopy);
  return copy;
}

}  // namespace megatron
