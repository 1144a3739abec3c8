#include "model/bert_encoder.h"

namespace megatron {

namespace {

InputEmbeddingConfig input_embedding_config(const BertConfig& c) {
  return {.model_name = "BERT",
          .vocab_size = c.vocab_size,
          .padded_vocab_size = c.padded_vocab_size,
          .hidden_size = c.hidden_size,
          .max_position_embeddings = c.max_position_embeddings,
          .num_tokentypes = c.num_tokentypes,
          .init_method_std = c.init_method_std,
          .hidden_dropout = c.hidden_dropout,
          .layernorm = c.embedding_layernorm(),
          .layernorm_epsilon = c.layernorm_epsilon};
}

}  // namespace

BertEncoder::BertEncoder(const BertConfig& config, bool with_pooler, const ParallelState& ps,
                         ParameterStore& store, const ComputeWeights& weights)
    : hidden_size_(config.hidden_size),
      embedding_(input_embedding_config(config), ps, store, weights),
      transformer_(config.transformer_config(), ps, store, weights) {
  if (with_pooler)
    pooler_ =
        std::make_unique<BertPooler>(config.hidden_size, config.init_method_std, store, weights);
}

void BertEncoder::init_weights(ParameterStore& store, uint64_t seed) const {
  embedding_.init_weights(store, seed);
  transformer_.init_weights(store, seed);
  if (pooler_) pooler_->init_weights(store, seed);
}

BertEncoder::Output BertEncoder::forward(Ctx& ctx, const Tensor& tokens, const Tensor& token_types,
                                         const Tensor& pad_mask, const DropoutScope& scope,
                                         Arena& arena, Arena& scratch) const {
  Tensor embedded =
      embedding_.forward(ctx.embedding, tokens, token_types, scope, arena);  // [s, b, h]
  ctx.seq = ctx.embedding.seq;
  ctx.batch = ctx.embedding.batch;
  check_shape(pad_mask, {ctx.batch, ctx.seq}, "BERT padding mask");
  check_dtype(pad_mask, DType::U8, "BERT padding mask");
  Output out;
  out.hidden = transformer_.forward(ctx.transformer, embedded, pad_mask, scope, arena, scratch);
  if (pooler_) out.pooled = pooler_->forward(ctx.pooler, out.hidden, arena);
  return out;
}

void BertEncoder::backward(Ctx& ctx, Tensor dhidden, const Tensor& dpooled, Arena& arena,
                           Arena& scratch) const {
  check_shape(dhidden, {ctx.seq, ctx.batch, hidden_size_}, "BERT hidden-state gradient");
  if (dpooled.defined()) {
    MT_CHECK(pooler_ != nullptr, "a pooled-output gradient for a BERT encoder without a pooler");
    pooler_->backward(ctx.pooler, dpooled, dhidden, arena);
  }
  Tensor dembedded = transformer_.backward(ctx.transformer, dhidden, arena, scratch);
  embedding_.backward(ctx.embedding, dembedded, arena);
}

}  // namespace megatron
