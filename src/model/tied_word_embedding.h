// The word embedding a tied LM head reads when a model is split into pipeline stages (GPT's and
// BERT's rule, Megatron's): the first stage holds it in its InputEmbedding; the last stage of a
// split model holds its own copy "embedding.word_embeddings.weight" [V_padded/t, h] (same
// name, same init, so both start equal). The first stage's table is marked
// StageTie::kOriginal and the copy StageTie::kCopy: the trainer all-reduces the two gradients
// over the embedding group (optim/grad_reduction.h), counts the copy once in the gradient norm
// and leaves it out of checkpoints.
#pragma once

#include <optional>

#include "model/input_embedding.h"
#include "model/stage_range.h"

namespace megatron {

// The word table of an InputEmbedding: "embedding.word_embeddings" [V_padded, h], split over
// the vocabulary — InputEmbedding's, and the copy's below.
VocabParallelEmbeddingConfig word_embedding_config(const InputEmbeddingConfig& config);

// The last stage's copy of the word embedding of `embedding` (none unless `stage` is last and
// not first). Call it after the first stage's InputEmbedding is registered: it also marks that
// table's stage tie (kOriginal when the first stage is not the last).
std::optional<VocabParallelEmbedding> tied_word_embedding_copy(
    const InputEmbeddingConfig& embedding, const StageRange& stage, const ParallelState& ps,
    ParameterStore& store, const ComputeWeights& weights);

}  // namespace megatron
