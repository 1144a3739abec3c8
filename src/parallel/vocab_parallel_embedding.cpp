#include "parallel/vocab_parallel_embedding.h"

#include "kernels/embedding.h"
#include "kernels/indexing.h"
#include "parallel/mappings.h"

namespace megatron {

VocabParallelEmbedding::VocabParallelEmbedding(const VocabParallelEmbeddingConfig& config,
                                               const ParallelState& ps, ParameterStore& store,
                                               const ComputeWeights& weights)
    : config_(config), tp_(ps.tp), weights_(weights) {
  MT_CHECK(config.num_embeddings % ps.tp_size == 0, config.name, ": vocabulary size ",
           config.num_embeddings, " is not divisible by the tensor-model-parallel size ",
           ps.tp_size, " (pad it with padded_vocab_size)");
  // The word embedding: --decoupled-lr's (Megatron's is_embedding_or_output_parameter) and an
  // embedding for muP.
  weight_index_ = store.add({.name = config.name + ".weight",
                             .full_shape = {config.num_embeddings, config.embedding_dim},
                             .partition_dim = 0,
                             .weight_decay = true,
                             .vocab_rows = config.vocab_rows,
                             .embedding_or_output = true,
                             .embedding = true});
  vocab_start_ = int64_t(ps.tp_rank) * (config.num_embeddings / ps.tp_size);
}

void VocabParallelEmbedding::init_weights(ParameterStore& store, uint64_t seed) const {
  init_normal(store.params()[weight_index_], seed, config_.init_std);
}

Tensor VocabParallelEmbedding::forward(Ctx& ctx, const Tensor& ids, Arena& arena) const {
  Tensor out = lookup(ctx, ids, arena);
  ReduceFromTpRegion::forward(*tp_, out);
  return out;
}

Tensor VocabParallelEmbedding::lookup(Ctx& ctx, const Tensor& ids, Arena& arena) const {
  check_dtype(ids, DType::I32, "VocabParallelEmbedding ids");
  ctx.ids = ids.view({ids.numel()});  // [N]
  const int64_t bad = kernels::first_out_of_range(ctx.ids, 0, config_.num_embeddings);
  MT_REQUIRE(bad < 0, config_.name, ": token id ", element_value<int32_t>(ctx.ids, bad),
             " at position ", bad, " is outside the vocabulary [0, ", config_.num_embeddings,
             "): the data was tokenized with a larger vocabulary; give the tokenizer (or "
             "--vocab-size) it was made with");
  const Tensor& table = weight();                                                     // [V/t, h]
  Tensor out = arena.alloc({ctx.ids.numel(), config_.embedding_dim}, table.dtype());  // [N, h]
  kernels::embedding_forward(ctx.ids, table, vocab_start_, out);
  Shape shape = ids.shape();
  shape.push_back(config_.embedding_dim);
  return out.view(shape);
}

void VocabParallelEmbedding::backward(const Ctx& ctx, const Tensor& dout) const {
  kernels::embedding_backward(dout.view({ctx.ids.numel(), config_.embedding_dim}), ctx.ids,
                              vocab_start_, weight_grad());
}

}  // namespace megatron
