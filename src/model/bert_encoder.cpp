#include "model/bert_encoder.h"

#include "parallel/mappings.h"

namespace megatron {

InputEmbeddingConfig bert_input_embedding_config(const BertConfig& c) {
  return {.model_name = "BERT",
          .vocab_size = c.vocab_size,
          .padded_vocab_size = c.padded_vocab_size,
          .hidden_size = c.hidden_size,
          .max_position_embeddings = c.max_position_embeddings,
          .num_tokentypes = c.num_tokentypes,
          .init_method_std = c.init_method_std,
          .hidden_dropout = c.hidden_dropout,
          .layernorm = c.embedding_layernorm(),
          .layernorm_epsilon = c.layernorm_epsilon,
          .sequence_parallel = c.sequence_parallel};
}

BertEncoder::BertEncoder(const BertConfig& config, bool with_pooler, const ParallelState& ps,
                         ParameterStore& store, const ComputeWeights& weights, StageRange stage)
    : hidden_size_(config.hidden_size),
      compute_dtype_(weights.dtype()),
      sequence_parallel_(config.sequence_parallel),
      tp_(ps.tp),
      stage_(stage),
      embedding_(stage.first
                     ? std::optional<InputEmbedding>(
                           std::in_place, bert_input_embedding_config(config), ps, store, weights)
                     : std::nullopt),
      transformer_(config.transformer_config(), ps, store, weights,
                   {stage.first_layer, stage.num_layers, stage.last}) {
  if (with_pooler && stage.last)
    pooler_ =
        std::make_unique<BertPooler>(config.hidden_size, config.init_method_std, store, weights);
}

const InputEmbedding& BertEncoder::embedding() const {
  MT_CHECK(embedding_.has_value(), "this BERT stage (layers from ", stage_.first_layer,
           ") is not the first pipeline stage: it has no input embedding");
  return *embedding_;
}

int64_t BertEncoder::sequence_shards() const {
  return sequence_parallel_ ? tp_->size() : 1;
}

void BertEncoder::init_weights(ParameterStore& store, uint64_t seed) const {
  if (embedding_) embedding_->init_weights(store, seed);
  transformer_.init_weights(store, seed);
  if (pooler_) pooler_->init_weights(store, seed);
}

BertEncoder::Output BertEncoder::forward(Ctx& ctx, const Tensor& input, const Tensor& token_types,
                                         const Tensor& pad_mask, const DropoutScope& scope,
                                         Arena& arena, Arena& scratch) const {
  Tensor x;  // [s, b, h], or this rank's sequence shard [s/t, b, h]
  if (embedding_) {
    x = embedding_->forward(ctx.embedding, input, token_types, scope, arena);
    ctx.seq = ctx.embedding.seq;
    ctx.batch = ctx.embedding.batch;
  } else {
    MT_CHECK(input.dim() == 3 && input.size(2) == hidden_size_ && input.dtype() == compute_dtype_,
             "a BERT stage's input must be the previous stage's output [s, b, ", hidden_size_,
             "] (s/t with sequence parallelism) in ", dtype_name(compute_dtype_), ", got ",
             input.describe());
    ctx.seq = input.size(0) * sequence_shards();
    ctx.batch = input.size(1);
    x = input;
  }
  check_shape(pad_mask, {ctx.batch, ctx.seq}, "BERT padding mask");
  check_dtype(pad_mask, DType::U8, "BERT padding mask");
  Output out;
  out.hidden = transformer_.forward(ctx.transformer, x, pad_mask, scope, arena, scratch);
  // The heads read whole sequences (see the header): [s/t, b, h] → [s, b, h].
  if (sequence_parallel_ && stage_.last) out.hidden = gather_first_dim(*tp_, out.hidden, arena);
  if (pooler_) out.pooled = pooler_->forward(ctx.pooler, out.hidden, arena);
  return out;
}

Tensor BertEncoder::backward(Ctx& ctx, Tensor dhidden, const Tensor& dpooled, Arena& arena,
                             Arena& scratch) const {
  const int64_t shards = stage_.last ? 1 : sequence_shards();  // the forward output's
  check_shape(dhidden, {ctx.seq / shards, ctx.batch, hidden_size_}, "BERT hidden-state gradient");
  if (dpooled.defined()) {
    MT_CHECK(pooler_ != nullptr, "a pooled-output gradient for a BERT encoder without a pooler");
    pooler_->backward(ctx.pooler, dpooled, dhidden, arena);
  }
  // The gather's backward: the heads' gradient is complete on every rank, keep this rank's
  // chunk [s/t, b, h] (a contiguous view).
  if (sequence_parallel_ && stage_.last) {
    const int64_t local = ctx.seq / tp_->size();
    dhidden = dhidden.slice(0, tp_->rank() * local, (tp_->rank() + 1) * local);
  }
  Tensor dembedded = transformer_.backward(ctx.transformer, dhidden, arena, scratch);
  if (!embedding_) return dembedded;
  embedding_->backward(ctx.embedding, dembedded, arena);
  return Tensor();
}

}  // namespace megatron
