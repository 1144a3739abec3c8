#include "model/gpt_model.h"

#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/gemm.h"
#include "model/language_model_config.h"
#include "parallel/mappings.h"

namespace megatron {

struct GptModel::Ctx {
  int64_t seq = 0, batch = 0;
  VocabParallelEmbedding::Ctx word;
  Tensor position_ids;            // i32 [s·b]
  Tensor embedding_dropout_mask;  // u8 [s·b, h] or undefined
  Transformer::Ctx transformer;
  Tensor hidden;  // LM head input [s·b, h]
  VocabParallelCrossEntropyCtx cross_entropy;
  Tensor loss_mask;  // f32 [s·b]
  double mask_sum = 0;
};

namespace {

// A [b, s] tensor as a contiguous [s, b] one (activations are sequence-major).
Tensor to_seq_major(const Tensor& t, Arena& arena) {
  Tensor out = arena.alloc({t.size(1), t.size(0)}, t.dtype());
  out.copy_from(t.transpose(0, 1));
  return out;
}

}  // namespace

TransformerConfig GptConfig::transformer_config() const {
  TransformerConfig t = shared_transformer_config(*this);
  t.attn_mask_type = AttnMaskType::kCausal;
  t.layernorm_order = LayerNormOrder::kPreLayerNorm;
  t.final_layernorm = true;
  return t;
}

void GptConfig::validate(int tp_size) const {
  validate_language_model_config(*this, tp_size, "GptModel");
}

GptModel::GptModel(const GptConfig& config, const ParallelState& ps, ParameterStore& store)
    : config_(config),
      ps_(ps),
      store_(store),
      weights_((config.validate(ps.tp_size), store), config.compute_dtype),
      word_embeddings_({.name = "embedding.word_embeddings",
                        .num_embeddings = config.padded_vocab_size,
                        .embedding_dim = config.hidden_size,
                        .init_std = config.init_method_std},
                       ps, store, weights_),
      position_embeddings_index_(store.add({"embedding.position_embeddings.weight",
                                            {config.max_position_embeddings, config.hidden_size},
                                            -1,
                                            true})),
      transformer_(config.transformer_config(), ps, store, weights_) {
  MT_CHECK(store.tp_size() == ps.tp_size && store.tp_rank() == ps.tp_rank,
           "the ParameterStore was made for TP rank ", store.tp_rank(), " of ", store.tp_size(),
           ", the parallel state is rank ", ps.tp_rank, " of ", ps.tp_size);
}

GptModel::~GptModel() = default;

void GptModel::init_weights(uint64_t seed) {
  word_embeddings_.init_weights(store_, seed);
  init_normal(store_.params()[position_embeddings_index_], seed, config_.init_method_std);
  transformer_.init_weights(store_, seed);
  refresh_compute_weights();
}

void GptModel::refresh_compute_weights() {
  weights_.refresh();
}

Tensor GptModel::forward_to_logits(Ctx& ctx, const Tensor& tokens, const DropoutScope& scope) {
  check_dtype(tokens, DType::I32, "GPT tokens");
  MT_CHECK(tokens.dim() == 2, "GPT tokens must be [b, s], got ", tokens.describe());
  const int64_t b = tokens.size(0), s = tokens.size(1), h = config_.hidden_size;
  MT_CHECK(s >= 1 && s <= config_.max_position_embeddings, "sequence length ", s,
           " must be in [1, --max-position-embeddings = ", config_.max_position_embeddings, "]");
  ctx.seq = s;
  ctx.batch = b;

  Tensor embedded = word_embeddings_.forward(ctx.word, to_seq_major(tokens, arena_), arena_)
                        .view({s * b, h});  // [s·b, h]
  ctx.position_ids = arena_.alloc({s * b}, DType::I32);
  int32_t* pos = ctx.position_ids.data<int32_t>();
  for (int64_t i = 0; i < s * b; ++i) pos[i] = int32_t(i / b);
  Tensor positions = arena_.alloc({s * b, h}, embedded.dtype());  // [s·b, h]
  kernels::embedding_forward(ctx.position_ids, weights_.weight(position_embeddings_index_), 0,
                             positions);
  kernels::axpy(1.0f, positions, embedded);

  ctx.embedding_dropout_mask = Tensor();
  if (scope.enabled && config_.hidden_dropout > 0.0f) {
    ctx.embedding_dropout_mask = arena_.alloc({s * b, h}, DType::U8);
    kernels::dropout_mask(scope.seed,
                          hidden_dropout_rows(scope, 0, DropoutSite::kEmbedding, s, b, h),
                          config_.hidden_dropout, ctx.embedding_dropout_mask);
    Tensor dropped = arena_.alloc({s * b, h}, embedded.dtype());
    kernels::dropout_forward(embedded, ctx.embedding_dropout_mask, config_.hidden_dropout, dropped);
    embedded = dropped;
  }

  Tensor hidden = transformer_.forward(ctx.transformer, embedded.view({s, b, h}), Tensor(), scope,
                                       arena_, scratch_);
  // LM head, tied to the word embedding: the input is copied to the TP region (f), each rank
  // computes its vocabulary shard of the logits, in f32 for the cross-entropy.
  ctx.hidden = CopyToTpRegion::forward(hidden).view({s * b, h});
  const Tensor& table = word_embeddings_.weight();                   // [V/t, h]
  Tensor logits = arena_.alloc({s * b, table.size(0)}, DType::F32);  // [s·b, V/t]
  kernels::gemm(ctx.hidden, false, table, true, logits);
  return logits;
}

float GptModel::forward_loss_from_logits(Ctx& ctx, const GptBatch& batch, const Tensor& logits) {
  const Shape bs = {ctx.batch, ctx.seq};
  check_shape(batch.labels, bs, "GPT labels");
  check_dtype(batch.labels, DType::I32, "GPT labels");
  check_shape(batch.loss_mask, bs, "GPT loss mask");
  check_dtype(batch.loss_mask, DType::F32, "GPT loss mask");
  Tensor labels = to_seq_major(batch.labels, arena_).view({ctx.seq * ctx.batch});
  ctx.loss_mask = to_seq_major(batch.loss_mask, arena_).view({ctx.seq * ctx.batch});
  Tensor losses = vocab_parallel_cross_entropy_forward(ctx.cross_entropy, *ps_.tp, logits, labels,
                                                       config_.vocab_size, arena_);
  const float* l = losses.data<float>();
  const float* m = ctx.loss_mask.data<float>();
  double weighted = 0;
  ctx.mask_sum = 0;
  for (int64_t i = 0; i < losses.numel(); ++i) {
    weighted += double(l[i]) * double(m[i]);
    ctx.mask_sum += double(m[i]);
  }
  return ctx.mask_sum > 0 ? float(weighted / ctx.mask_sum) : 0.0f;
}

void GptModel::backward(Ctx& ctx, float grad_scale) {
  const int64_t n = ctx.seq * ctx.batch, h = config_.hidden_size;
  Tensor dloss = arena_.alloc({n}, DType::F32);  // [s·b]
  float* dl = dloss.data<float>();
  const float* m = ctx.loss_mask.data<float>();
  const double per_token = ctx.mask_sum > 0 ? double(grad_scale) / ctx.mask_sum : 0.0;
  for (int64_t i = 0; i < n; ++i) dl[i] = float(double(m[i]) * per_token);
  Tensor dlogits = vocab_parallel_cross_entropy_backward(ctx.cross_entropy, dloss);  // f32
  if (weights_.dtype() != DType::F32) {
    Tensor cast = arena_.alloc(dlogits.shape(), weights_.dtype());
    kernels::cast(dlogits, cast);
    dlogits = cast;
  }

  const Tensor& table = word_embeddings_.weight();  // [V/t, h]
  kernels::gemm(dlogits, true, ctx.hidden, false, word_embeddings_.weight_grad(), 1.0f, 1.0f);
  Tensor dhidden = arena_.alloc({n, h}, weights_.dtype());  // [s·b, h]
  kernels::gemm(dlogits, false, table, false, dhidden);
  CopyToTpRegion::backward(*ps_.tp, dhidden);

  Tensor dembedded =
      transformer_
          .backward(ctx.transformer, dhidden.view({ctx.seq, ctx.batch, h}), arena_, scratch_)
          .view({n, h});
  if (ctx.embedding_dropout_mask.defined()) {
    Tensor undropped = arena_.alloc({n, h}, dembedded.dtype());
    kernels::dropout_backward(dembedded, ctx.embedding_dropout_mask, config_.hidden_dropout,
                              undropped);
    dembedded = undropped;
  }
  word_embeddings_.backward(ctx.word, dembedded);
  kernels::embedding_backward(dembedded, ctx.position_ids, 0,
                              weights_.grad(position_embeddings_index_));
}

float GptModel::forward_backward(const GptBatch& batch, float grad_scale, uint64_t seed) {
  arena_.reset();
  Ctx ctx;
  const DropoutScope scope{true, seed, batch.iteration, batch.first_sample};
  Tensor logits = forward_to_logits(ctx, batch.tokens, scope);
  const float loss = forward_loss_from_logits(ctx, batch, logits);
  backward(ctx, grad_scale);
  return loss;
}

float GptModel::forward_loss(const GptBatch& batch) {
  arena_.reset();
  Ctx ctx;
  Tensor logits = forward_to_logits(ctx, batch.tokens, DropoutScope{});
  return forward_loss_from_logits(ctx, batch, logits);
}

Tensor GptModel::forward_logits(const Tensor& tokens) {
  arena_.reset();
  Ctx ctx;
  Tensor local = forward_to_logits(ctx, tokens, DropoutScope{});  // [s·b, V/t]
  Tensor full = gather_last_dim(*ps_.tp, local, arena_);          // [s·b, V_padded]
  const int64_t s = ctx.seq, b = ctx.batch;
  Tensor out = Tensor::empty({b, s, config_.vocab_size}, DType::F32);
  out.copy_from(
      full.view({s, b, config_.padded_vocab_size}).slice(2, 0, config_.vocab_size).transpose(0, 1));
  return out;
}

int64_t padded_vocab_size(int64_t vocab, int make_vocab_size_divisible_by, int tp_size) {
  MT_CHECK(vocab > 0, "vocabulary size must be positive, got ", vocab);
  MT_CHECK(make_vocab_size_divisible_by > 0 && tp_size > 0, "--make-vocab-size-divisible-by (",
           make_vocab_size_divisible_by, ") and --tensor-model-parallel-size (", tp_size,
           ") must be positive");
  const int64_t multiple = int64_t(make_vocab_size_divisible_by) * tp_size;
  return (vocab + multiple - 1) / multiple * multiple;
}

}  // namespace megatron
