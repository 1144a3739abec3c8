#include "model/input_embedding.h"

#include <string>

#include "core/upload.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/indexing.h"
#include "model/tied_word_embedding.h"
#include "parallel/mappings.h"

namespace megatron {

Tensor to_seq_major(const Tensor& t, Arena& arena) {
  Tensor out = arena.alloc({t.size(1), t.size(0)}, t.dtype());
  kernels::copy(t.transpose(0, 1), out);
  return out;
}

InputEmbedding::InputEmbedding(const InputEmbeddingConfig& config, const ParallelState& ps,
                               ParameterStore& store, const ComputeWeights& weights)
    : config_(config),
      tp_(ps.tp),
      cp_size_(ps.cp_size),
      cp_rank_(ps.cp_rank),
      weights_(weights),
      word_(word_embedding_config(config), ps, store, weights) {
  if (config.learned_positions)
    position_index_ = store.add({.name = "embedding.position_embeddings.weight",
                                 .full_shape = {config.max_position_embeddings, config.hidden_size},
                                 .embedding = true});
  if (config.num_tokentypes > 0)
    tokentype_index_ = store.add({.name = "embedding.tokentype_embeddings.weight",
                                  .full_shape = {config.num_tokentypes, config.hidden_size},
                                  .embedding = true});
  if (config.layernorm)
    layernorm_ = std::make_unique<LayerNorm>(
        "embedding.layernorm", config.hidden_size, config.layernorm_epsilon, store, weights,
        NormOptions{.sequence_parallel = config.sequence_parallel});
}

void InputEmbedding::init_weights(ParameterStore& store, uint64_t seed) const {
  word_.init_weights(store, seed);
  if (position_index_) init_normal(store.params()[*position_index_], seed, config_.init_method_std);
  if (tokentype_index_)
    init_normal(store.params()[*tokentype_index_], seed, config_.init_method_std);
  if (layernorm_) layernorm_->init_weights(store);
}

Tensor InputEmbedding::forward(Ctx& ctx, const Tensor& tokens, const Tensor& token_types,
                               const DropoutScope& scope, Arena& arena,
                               int64_t position_start) const {
  const std::string model = config_.model_name;
  check_dtype(tokens, DType::I32, (model + " tokens").c_str());
  MT_CHECK(tokens.dim() == 2, model, " tokens must be [b, s], got ", tokens.describe());
  if (tokentype_index_) {
    check_shape(token_types, tokens.shape(), (model + " token types").c_str());
    check_dtype(token_types, DType::I32, (model + " token types").c_str());
  }
  const int64_t s = tokens.size(1);
  // A context-parallel rank's s positions are its two chunks of the whole sequence.
  const ContextParallelLayout layout = ContextParallelLayout::of_local(s, cp_size_, cp_rank_);
  MT_CHECK(!layout.split() || position_start == 0,
           "a context-parallel embedding is for training, not decoding");
  MT_CHECK(s >= 1 && layout.seq <= config_.max_position_embeddings, "sequence length ", layout.seq,
           " must be in [1, --max-position-embeddings = ", config_.max_position_embeddings, "]");
  MT_CHECK(position_start >= 0 && position_start + s <= config_.max_position_embeddings,
           "positions [", position_start, ", ", position_start + s,
           ") exceed --max-position-embeddings = ", config_.max_position_embeddings);
  return embed(ctx, to_seq_major(tokens, arena), token_types, scope, arena, position_start, 0, 0);
}

Tensor InputEmbedding::forward_rows(Ctx& ctx, const Tensor& tokens,
                                    const std::vector<int64_t>& row_starts, Arena& arena) const {
  const std::string model = config_.model_name;
  check_dtype(tokens, DType::I32, (model + " tokens").c_str());
  MT_CHECK(tokens.dim() == 2 && int64_t(row_starts.size()) == tokens.size(0), model,
           " tokens must be [b, s] with one start per row, got ", tokens.describe(), " and ",
           row_starts.size(), " starts");
  MT_CHECK(!tokentype_index_ && !config_.sequence_parallel && cp_size_ == 1,
           "rows at their own positions are for decoding: no token types, no sequence or context "
           "parallelism");
  const int64_t s = tokens.size(1);
  for (int64_t start : row_starts)
    MT_CHECK(start >= 0 && s >= 1 && start + s <= config_.max_position_embeddings, "positions [",
             start, ", ", start + s,
             ") exceed --max-position-embeddings = ", config_.max_position_embeddings);
  return embed(ctx, to_seq_major(tokens, arena), Tensor(), DropoutScope{}, arena, 0, 0, 0,
               &row_starts);
}

Tensor InputEmbedding::forward_shifted(Ctx& ctx, const Tensor& tokens, int64_t shift,
                                       int dropout_layer, const DropoutScope& scope,
                                       Arena& arena) const {
  check_dtype(tokens, DType::I32, "shifted tokens");
  MT_CHECK(tokens.dim() == 2, "shifted tokens must be [b, s], got ", tokens.describe());
  MT_CHECK(!tokentype_index_ && cp_size_ == 1,
           "a shifted embedding has no token-type table and no context parallelism");
  const int64_t b = tokens.size(0), s = tokens.size(1);
  MT_CHECK(shift >= 1 && shift < s && s <= config_.max_position_embeddings, "shift ", shift,
           " of a sequence of ", s, " (--max-position-embeddings ", config_.max_position_embeddings,
           ")");
  // [s, b] sequence-major: rows [0, s − shift) are the rows from `shift` on, the rest token 0
  // (fill_positions over one "sample" of all the rows writes 0 everywhere).
  const Tensor ids = to_seq_major(tokens, arena);
  Tensor shifted = arena.alloc({s, b}, DType::I32);
  Tensor head = shifted.slice(0, 0, s - shift), tail = shifted.slice(0, s - shift, s);
  kernels::copy(ids.slice(0, shift, s), head);
  kernels::fill_positions(tail, tail.numel(), 0);
  return embed(ctx, shifted, Tensor(), scope, arena, 0, shift, dropout_layer);
}

Tensor InputEmbedding::embed(Ctx& ctx, const Tensor& ids, const Tensor& token_types,
                             const DropoutScope& scope, Arena& arena, int64_t position_start,
                             int64_t shift, int dropout_layer,
                             const std::vector<int64_t>* row_starts) const {
  const std::string model = config_.model_name;
  const int64_t s = ids.size(0), b = ids.size(1), h = config_.hidden_size;
  const ContextParallelLayout layout = ContextParallelLayout::of_local(s, cp_size_, cp_rank_);
  ctx.seq = s;
  ctx.batch = b;

  // This rank continues with positions [seq_begin, seq_begin + s_local): all of them, or its
  // sequence shard. With sequence parallelism the vocabulary-parallel partial lookups are
  // reduce-scattered straight to the shard (Korthikanti et al. §4.2.2), half the bytes of an
  // all-reduce and no slice; the replicated tables are then looked up for the shard's rows only.
  Tensor embedded;  // [s_local, b, h]
  int64_t seq_begin = 0, s_local = s;
  if (config_.sequence_parallel) {
    MT_CHECK(position_start == 0, "a sequence-parallel embedding is for training, not decoding");
    embedded = ReduceScatterToSequenceParallelRegion::forward(
        *tp_, word_.lookup(ctx.word, ids, arena), arena);
    s_local = embedded.size(0);
    seq_begin = tp_->rank() * s_local;
  } else {
    embedded = word_.forward(ctx.word, ids, arena);
  }
  const int64_t rows = s_local * b, row_begin = seq_begin * b;
  embedded = embedded.view({rows, h});
  Tensor table_rows = arena.alloc({rows, h}, embedded.dtype());  // [s_local·b, h]
  // The ids of the whole sequence [s·b] are kept: backward scatters the gradient of every
  // position (all-gathered with sequence parallelism), so the replicated tables' gradients are
  // complete on every rank and need no reduction.
  ctx.position_ids = Tensor();
  if (position_index_) {
    if (row_starts) {
      std::vector<int32_t> positions(size_t(s * b));  // element (j, r): row r's start + j
      for (int64_t j = 0; j < s; ++j)
        for (int64_t r = 0; r < b; ++r)
          positions[size_t(j * b + r)] = int32_t((*row_starts)[size_t(r)] + j);
      ctx.position_ids = upload({Tensor::from_vector(positions, {s * b})}, arena)[0];
    } else {
      ctx.position_ids = arena.alloc({s * b}, DType::I32);  // position of row i: i / b
      if (layout.split()) {
        const int64_t c = layout.chunk();
        for (int k = 0; k < 2; ++k) {
          Tensor chunk_ids = ctx.position_ids.slice(0, k * c * b, (k + 1) * c * b);
          kernels::fill_positions(chunk_ids, b, layout.chunk_begin(k));
        }
      } else if (shift > 0) {
        // Positions shifted like the tokens: i + shift, then 0 (Megatron rolls them too).
        Tensor head = ctx.position_ids.slice(0, 0, (s - shift) * b);
        Tensor tail = ctx.position_ids.slice(0, (s - shift) * b, s * b);
        kernels::fill_positions(head, b, shift);
        kernels::fill_positions(tail, tail.numel(), 0);
      } else {
        kernels::fill_positions(ctx.position_ids, b, position_start);
      }
    }
    kernels::embedding_forward(ctx.position_ids.slice(0, row_begin, row_begin + rows),
                               weights_.weight(*position_index_), 0, table_rows);
    kernels::axpy(1.0f, table_rows, embedded);
  }
  ctx.tokentype_ids = Tensor();
  if (tokentype_index_) {
    ctx.tokentype_ids = to_seq_major(token_types, arena).view({s * b});
    const int64_t bad = kernels::first_out_of_range(ctx.tokentype_ids, 0, config_.num_tokentypes);
    MT_REQUIRE(bad < 0, model, " token type ", element_value<int32_t>(ctx.tokentype_ids, bad),
               " is outside [0, ", config_.num_tokentypes, ")");
    kernels::embedding_forward(ctx.tokentype_ids.slice(0, row_begin, row_begin + rows),
                               weights_.weight(*tokentype_index_), 0, table_rows);
    kernels::axpy(1.0f, table_rows, embedded);
  }

  if (config_.output_mult != 1.0f) kernels::scale(embedded, config_.output_mult);
  if (layernorm_) embedded = layernorm_->forward(ctx.layernorm, embedded, arena);

  ctx.dropout_mask = Tensor();
  if (scope.enabled && config_.hidden_dropout > 0.0f) {
    ctx.dropout_mask = arena.alloc({rows, h}, DType::U8);
    kernels::dropout_mask(scope.seed,
                          hidden_dropout_rows(scope, dropout_layer, DropoutSite::kEmbedding,
                                              s_local, b, h, seq_begin, layout),
                          config_.hidden_dropout, ctx.dropout_mask);
    Tensor dropped = arena.alloc({rows, h}, embedded.dtype());
    kernels::dropout_forward(embedded, ctx.dropout_mask, config_.hidden_dropout, dropped);
    embedded = dropped;
  }
  return embedded.view({s_local, b, h});
}

void InputEmbedding::backward(const Ctx& ctx, const Tensor& dout, Arena& arena) const {
  const int64_t h = config_.hidden_size;
  Tensor d = dout.view({-1, h});  // [s·b, h], or [s/t·b, h]
  if (ctx.dropout_mask.defined()) {
    Tensor undropped = arena.alloc(d.shape(), d.dtype());
    kernels::dropout_backward(d, ctx.dropout_mask, config_.hidden_dropout, undropped);
    d = undropped;
  }
  if (layernorm_) {
    Tensor dsum = arena.alloc(d.shape(), d.dtype());
    layernorm_->backward(ctx.layernorm, d, dsum, 0.0f);
    d = dsum;
  }
  if (config_.output_mult != 1.0f) {
    Tensor scaled = arena.alloc(d.shape(), d.dtype());
    kernels::copy(d, scaled);
    kernels::scale(scaled, config_.output_mult);
    d = scaled;
  }
  // The gradient of the whole sequence: the reduce-scatter's backward all-gathers the shards.
  if (config_.sequence_parallel)
    d = ReduceScatterToSequenceParallelRegion::backward(*tp_, d.view({-1, ctx.batch, h}), arena)
            .view({ctx.seq * ctx.batch, h});
  word_.backward(ctx.word, d);
  if (position_index_)
    kernels::embedding_backward(d, ctx.position_ids, 0, weights_.grad(*position_index_));
  if (tokentype_index_)
    kernels::embedding_backward(d, ctx.tokentype_ids, 0, weights_.grad(*tokentype_index_));
}

}  // namespace megatron
