#include "model/bert_model.h"

#include <cstring>
#include <vector>

#include "kernels/elementwise.h"
#include "parallel/mappings.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace megatron {

struct BertModel::Ctx {
  int64_t seq = 0, batch = 0;
  InputEmbedding::Ctx embedding;
  Transformer::Ctx transformer;
  std::vector<int64_t> scored_rows;  // rows of the [s·b, h] hidden states the MLM head scores
  BertLmHead::Ctx lm_head;
  VocabParallelCrossEntropyCtx cross_entropy;
  std::vector<float> loss_weights;  // loss-mask value of each scored row
  double mask_sum = 0;
  BertBinaryHead::Ctx binary;
};

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

// out [rows.size(), h] = x[rows] for x [N, h] (contiguous).
Tensor gather_rows(const Tensor& x, const std::vector<int64_t>& rows, Arena& arena) {
  const int64_t h = x.size(1);
  const size_t row_bytes = size_t(h) * dtype_size(x.dtype());
  Tensor out = arena.alloc({int64_t(rows.size()), h}, x.dtype());
  const char* src = static_cast<const char*>(x.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dst + i * row_bytes, src + size_t(rows[i]) * row_bytes, row_bytes);
  return out;
}

// x[rows[i]] = src[i] for x [N, h], src [rows.size(), h] of one dtype (rows are distinct).
void scatter_rows(const Tensor& src, const std::vector<int64_t>& rows, Tensor& x) {
  const size_t row_bytes = size_t(x.size(1)) * dtype_size(x.dtype());
  const char* s = static_cast<const char*>(src.raw_data());
  char* d = static_cast<char*>(x.raw_data());
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(d + size_t(rows[i]) * row_bytes, s + i * row_bytes, row_bytes);
}

}  // namespace

BertModel::BertModel(const BertConfig& config, const ParallelState& ps, ParameterStore& store)
    : config_(config),
      ps_(ps),
      store_(store),
      weights_((config.validate(ps.tp_size), store), config.compute_dtype),
      embedding_(input_embedding_config(config), ps, store, weights_),
      transformer_(config.transformer_config(), ps, store, weights_),
      lm_head_(config, ps, store, weights_, embedding_.word_embeddings()) {
  MT_CHECK(store.tp_size() == ps.tp_size && store.tp_rank() == ps.tp_rank,
           "the ParameterStore was made for TP rank ", store.tp_rank(), " of ", store.tp_size(),
           ", the parallel state is rank ", ps.tp_rank, " of ", ps.tp_size);
  if (config.binary_head) binary_head_ = std::make_unique<BertBinaryHead>(config, store, weights_);
}

BertModel::~BertModel() = default;

void BertModel::init_weights(uint64_t seed) {
  embedding_.init_weights(store_, seed);
  transformer_.init_weights(store_, seed);
  lm_head_.init_weights(store_, seed);
  if (binary_head_) binary_head_->init_weights(store_, seed);
  refresh_compute_weights();
}

void BertModel::refresh_compute_weights() {
  weights_.refresh();
}

Tensor BertModel::forward_hidden(Ctx& ctx, const BertBatch& batch, const DropoutScope& scope) {
  Tensor embedded = embedding_.forward(ctx.embedding, batch.tokens, batch.token_types, scope,
                                       arena_);  // [s, b, h]
  ctx.seq = ctx.embedding.seq;
  ctx.batch = ctx.embedding.batch;
  check_shape(batch.pad_mask, {ctx.batch, ctx.seq}, "BERT padding mask");
  check_dtype(batch.pad_mask, DType::U8, "BERT padding mask");
  return transformer_.forward(ctx.transformer, embedded, batch.pad_mask, scope, arena_, scratch_);
}

BertLosses BertModel::forward_losses(Ctx& ctx, const BertBatch& batch, const Tensor& hidden) {
  const int64_t s = ctx.seq, b = ctx.batch, h = config_.hidden_size;
  check_shape(batch.labels, {b, s}, "BERT MLM labels");
  check_dtype(batch.labels, DType::I32, "BERT MLM labels");
  check_shape(batch.loss_mask, {b, s}, "BERT loss mask");
  check_dtype(batch.loss_mask, DType::F32, "BERT loss mask");

  // Rows of [s·b] (row = position·b + sample) that carry MLM loss.
  Tensor mask = to_seq_major(batch.loss_mask, arena_);  // f32 [s, b]
  Tensor labels = to_seq_major(batch.labels, arena_);   // i32 [s, b]
  const float* m = mask.data<float>();
  const int32_t* l = labels.data<int32_t>();
  std::vector<int32_t> targets;
  ctx.scored_rows.clear();
  ctx.loss_weights.clear();
  ctx.mask_sum = 0;
  for (int64_t row = 0; row < s * b; ++row) {
    if (m[row] == 0.0f) continue;
    MT_CHECK(l[row] >= 0 && l[row] < config_.vocab_size, "BERT MLM label ", l[row],
             " at a masked position is outside the vocabulary [0, ", config_.vocab_size, ")");
    ctx.scored_rows.push_back(row);
    ctx.loss_weights.push_back(m[row]);
    targets.push_back(l[row]);
    ctx.mask_sum += double(m[row]);
  }

  BertLosses losses;
  if (!ctx.scored_rows.empty()) {
    Tensor rows = gather_rows(hidden.view({s * b, h}), ctx.scored_rows, arena_);  // [n, h]
    Tensor logits = lm_head_.forward(ctx.lm_head, rows, arena_);                  // f32 [n, V/t]
    Tensor target_ids = arena_.alloc({int64_t(targets.size())}, DType::I32);
    std::memcpy(target_ids.raw_data(), targets.data(), targets.size() * sizeof(int32_t));
    Tensor token_losses = vocab_parallel_cross_entropy_forward(
        ctx.cross_entropy, *ps_.tp, logits, target_ids, config_.vocab_size, arena_);
    const float* tl = token_losses.data<float>();
    double weighted = 0;
    for (size_t i = 0; i < targets.size(); ++i) weighted += double(tl[i]) * ctx.loss_weights[i];
    losses.lm = ctx.mask_sum != 0 ? float(weighted / ctx.mask_sum) : 0.0f;
  }
  if (binary_head_) {
    binary_head_->forward(ctx.binary, hidden, arena_);
    losses.sop = binary_head_->loss(ctx.binary, batch.sop_labels, arena_);
  }
  return losses;
}

void BertModel::backward(Ctx& ctx, float grad_scale) {
  const int64_t n = ctx.seq * ctx.batch, h = config_.hidden_size;
  Tensor dhidden = arena_.zeros({n, h}, weights_.dtype());  // [s·b, h]
  if (!ctx.scored_rows.empty() && ctx.mask_sum != 0) {
    const int64_t scored = int64_t(ctx.scored_rows.size());
    Tensor dloss = arena_.alloc({scored}, DType::F32);  // [n_scored]
    float* dl = dloss.data<float>();
    for (int64_t i = 0; i < scored; ++i)
      dl[i] = float(double(ctx.loss_weights[size_t(i)]) * double(grad_scale) / ctx.mask_sum);
    Tensor dlogits = vocab_parallel_cross_entropy_backward(ctx.cross_entropy, dloss);
    Tensor drows = lm_head_.backward(ctx.lm_head, dlogits, arena_);  // [n_scored, h]
    scatter_rows(drows, ctx.scored_rows, dhidden);
  }
  Tensor dhidden3 = dhidden.view({ctx.seq, ctx.batch, h});
  if (binary_head_) binary_head_->backward(ctx.binary, grad_scale, dhidden3, arena_);
  Tensor dembedded = transformer_.backward(ctx.transformer, dhidden3, arena_, scratch_);
  embedding_.backward(ctx.embedding, dembedded, arena_);
}

BertLosses BertModel::forward_backward(const BertBatch& batch, float grad_scale, uint64_t seed) {
  arena_.reset();
  Ctx ctx;
  const DropoutScope scope{true, seed, batch.iteration, batch.first_sample};
  Tensor hidden = forward_hidden(ctx, batch, scope);
  const BertLosses losses = forward_losses(ctx, batch, hidden);
  backward(ctx, grad_scale);
  return losses;
}

BertLosses BertModel::forward_loss(const BertBatch& batch) {
  arena_.reset();
  Ctx ctx;
  Tensor hidden = forward_hidden(ctx, batch, DropoutScope{});
  return forward_losses(ctx, batch, hidden);
}

BertOutputs BertModel::forward_logits(const Tensor& tokens, const Tensor& token_types,
                                      const Tensor& pad_mask) {
  arena_.reset();
  Ctx ctx;
  BertBatch batch;
  batch.tokens = tokens;
  batch.token_types = token_types;
  batch.pad_mask = pad_mask;
  Tensor hidden = forward_hidden(ctx, batch, DropoutScope{});  // [s, b, h]
  const int64_t s = ctx.seq, b = ctx.batch, h = config_.hidden_size;
  Tensor local = lm_head_.forward(ctx.lm_head, hidden.view({s * b, h}), arena_);  // [s·b, V/t]
  Tensor full = gather_last_dim(*ps_.tp, local, arena_);  // [s·b, V_padded]
  BertOutputs out;
  out.mlm_logits = Tensor::empty({b, s, config_.vocab_size}, DType::F32);
  out.mlm_logits.copy_from(
      full.view({s, b, config_.padded_vocab_size}).slice(2, 0, config_.vocab_size).transpose(0, 1));
  if (binary_head_) out.sop_logits = binary_head_->forward(ctx.binary, hidden, arena_).clone();
  return out;
}

}  // namespace megatron
