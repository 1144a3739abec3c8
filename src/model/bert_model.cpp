#include "model/bert_model.h"

#include "core/upload.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/indexing.h"
#include "model/tied_word_embedding.h"
#include "parallel/mappings.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace megatron {

struct BertModel::Ctx {
  explicit Ctx(Arena& a) : arena(a) {}
  Arena& arena;  // this micro-batch's activations
  BertEncoder::Ctx encoder;
  Tensor masked_rows;     // i32 [n]: rows of the [s·b, h] hidden states the MLM head scores
  Tensor masked_weights;  // f32 [n]: the loss weight of each scored row
  BertLmHead::Ctx lm_head;
  VocabParallelCrossEntropyCtx cross_entropy;
  double mask_sum = 0;  // Σ masked_weights
  BertBinaryHead::Ctx binary;
  BertLosses losses;  // the last stage's forward_stage
};

class BertModel::StageCtx : public StageContext<Ctx> {
 public:
  using StageContext::StageContext;
};
template struct StageDelete<BertModel::StageCtx>;

namespace {

std::optional<BertLmHead> last_stage_lm_head(const BertConfig& c, const StageRange& stage,
                                             const ParallelState& ps, ParameterStore& store,
                                             const ComputeWeights& weights,
                                             const BertEncoder& encoder,
                                             const std::optional<VocabParallelEmbedding>& copy) {
  if (!stage.last) return std::nullopt;
  return std::optional<BertLmHead>(std::in_place, c, ps, store, weights,
                                   copy ? *copy : encoder.embedding().word_embeddings());
}

}  // namespace

BertModel::BertModel(const BertConfig& config, const ParallelState& ps, ParameterStore& store,
                     StageRange stage)
    : config_(config),
      ps_(ps),
      store_(store),
      weights_((config.validate(ps.tp_size), store), config.compute_dtype),
      encoder_(config, /*with_pooler=*/config.binary_head, ps, store, weights_, stage),
      head_embedding_(tied_word_embedding_copy(bert_input_embedding_config(config), stage, ps,
                                               store, weights_)),
      lm_head_(last_stage_lm_head(config, stage, ps, store, weights_, encoder_, head_embedding_)),
      arena_(store.device()),
      scratch_(store.device()) {
  MT_CHECK(store.tp_size() == ps.tp_size && store.tp_rank() == ps.tp_rank,
           "the ParameterStore was made for TP rank ", store.tp_rank(), " of ", store.tp_size(),
           ", the parallel state is rank ", ps.tp_rank, " of ", ps.tp_size);
  if (config.binary_head && stage.last)
    binary_head_ = std::make_unique<BertBinaryHead>(config, store, weights_);
}

BertModel::~BertModel() = default;

void BertModel::init_weights(uint64_t seed) {
  encoder_.init_weights(store_, seed);
  if (head_embedding_) head_embedding_->init_weights(store_, seed);
  if (lm_head_) lm_head_->init_weights(store_, seed);
  if (binary_head_) binary_head_->init_weights(store_, seed);
  refresh_compute_weights();
}

void BertModel::refresh_compute_weights() {
  weights_.refresh();
}

void BertModel::check_whole(const char* what) const {
  MT_CHECK(stage().whole(), what,
           ": this BertModel holds one pipeline stage, not the whole model (layers from ",
           stage().first_layer, ")");
}

Shape BertModel::stage_activation_shape(int64_t micro_batch) const {
  return {config_.seq_length / encoder_.sequence_shards(), micro_batch, config_.hidden_size};
}

BertEncoder::Output BertModel::forward_encoder(Ctx& ctx, const BertBatch& batch,
                                               const Tensor& input, const DropoutScope& scope) {
  return encoder_.forward(ctx.encoder, stage().first ? batch.tokens : input, batch.token_types,
                          batch.pad_mask, scope, ctx.arena, scratch_);
}

BertLosses BertModel::forward_losses(Ctx& ctx, const BertBatch& batch,
                                     const BertEncoder::Output& encoded) {
  const Tensor& hidden = encoded.hidden;  // [s, b, h]
  const int64_t s = ctx.encoder.seq, b = ctx.encoder.batch, h = config_.hidden_size;
  MT_CHECK(batch.masked_rows.defined() && batch.masked_rows.dim() == 1,
           "BERT masked rows must be [n], got ", batch.masked_rows.describe());
  const int64_t n = batch.masked_rows.numel();
  check_dtype(batch.masked_rows, DType::I32, "BERT masked rows");
  check_shape(batch.masked_labels, {n}, "BERT MLM labels");
  check_dtype(batch.masked_labels, DType::I32, "BERT MLM labels");
  check_shape(batch.masked_weights, {n}, "BERT MLM loss weights");
  check_dtype(batch.masked_weights, DType::F32, "BERT MLM loss weights");
  ctx.masked_rows = batch.masked_rows;
  ctx.masked_weights = batch.masked_weights;
  ctx.mask_sum = 0;

  BertLosses losses;
  if (n > 0) {
    const int64_t bad_row = kernels::first_out_of_range(batch.masked_rows, 0, s * b);
    MT_CHECK(bad_row < 0, "BERT masked row ", element_value<int32_t>(batch.masked_rows, bad_row),
             " is outside the ", s * b, " rows (seq ", s, " x batch ", b, ") of the micro-batch");
    const int64_t bad_label =
        kernels::first_out_of_range(batch.masked_labels, 0, config_.vocab_size);
    MT_CHECK(bad_label < 0, "BERT MLM label ",
             element_value<int32_t>(batch.masked_labels, bad_label),
             " at a masked position is outside the vocabulary [0, ", config_.vocab_size, ")");
    // The scored rows: a row gather is an embedding lookup with the hidden states as table.
    Tensor rows = ctx.arena.alloc({n, h}, hidden.dtype());  // [n, h]
    kernels::embedding_forward(batch.masked_rows, hidden.view({s * b, h}), 0, rows);
    Tensor logits = lm_head_->forward(ctx.lm_head, rows, ctx.arena);  // f32 [n, V/t]
    Tensor token_losses = vocab_parallel_cross_entropy_forward(
        ctx.cross_entropy, *ps_.tp, logits, batch.masked_labels, config_.vocab_size, ctx.arena);
    const kernels::WeightedSum sum = kernels::weighted_sum(token_losses, batch.masked_weights);
    ctx.mask_sum = sum.weights;
    losses.lm = ctx.mask_sum != 0 ? float(sum.weighted / ctx.mask_sum) : 0.0f;
  }
  if (binary_head_) {
    binary_head_->forward(ctx.binary, encoded.pooled, ctx.arena);
    losses.sop = binary_head_->loss(ctx.binary, batch.sop_labels, ctx.arena);
  }
  return losses;
}

Tensor BertModel::backward(Ctx& ctx, float grad_scale, Tensor dhidden) {
  const int64_t n = ctx.encoder.seq * ctx.encoder.batch, h = config_.hidden_size;
  if (!stage().last)
    return encoder_.backward(ctx.encoder, std::move(dhidden), Tensor(), ctx.arena, scratch_);
  const int64_t scored = ctx.masked_rows.defined() ? ctx.masked_rows.numel() : 0;
  // dhidden: [s·b, h] in the compute dtype, from the MLM head
  if (scored > 0 && ctx.mask_sum != 0) {
    // dloss = weight · grad_scale / Σ weight (the weighted mean's gradient)
    Tensor dloss = ctx.arena.alloc({scored}, DType::F32);  // [n_scored]
    kernels::copy(ctx.masked_weights, dloss);
    kernels::scale(dloss, float(double(grad_scale) / ctx.mask_sum));
    Tensor dlogits = vocab_parallel_cross_entropy_backward(ctx.cross_entropy, dloss);
    Tensor drows = lm_head_->backward(ctx.lm_head, dlogits, ctx.arena);  // [n_scored, h]
    // The rows' gradients go back to their rows, zeros elsewhere: an embedding backward
    // (scatter-add into an f32 table) with the distinct masked rows as ids, so exact.
    Tensor scattered = ctx.arena.zeros({n, h}, DType::F32);  // [s·b, h]
    kernels::embedding_backward(drows, ctx.masked_rows, 0, scattered);
    if (weights_.dtype() == DType::F32) {
      dhidden = scattered;
    } else {
      dhidden = ctx.arena.alloc({n, h}, weights_.dtype());
      kernels::cast(scattered, dhidden);
    }
  } else {
    dhidden = ctx.arena.zeros({n, h}, weights_.dtype());
  }
  Tensor dpooled;  // f32 [b, h], undefined without the binary head
  if (binary_head_) dpooled = binary_head_->backward(ctx.binary, grad_scale, ctx.arena);
  return encoder_.backward(ctx.encoder, dhidden.view({ctx.encoder.seq, ctx.encoder.batch, h}),
                           dpooled, ctx.arena, scratch_);
}

BertBatch BertModel::on_device(const BertBatch& batch, Arena& arena) {
  BertBatch d = batch;
  std::vector<Tensor> moved =
      upload({batch.tokens, batch.token_types, batch.pad_mask, batch.masked_rows,
              batch.masked_labels, batch.masked_weights, batch.sop_labels},
             arena);
  d.tokens = moved[0];
  d.token_types = moved[1];
  d.pad_mask = moved[2];
  d.masked_rows = moved[3];
  d.masked_labels = moved[4];
  d.masked_weights = moved[5];
  d.sop_labels = moved[6];
  return d;
}

size_t BertModel::stage_activation_bytes(const StageCtx& sc) const {
  return sc.activation_bytes();
}

BertModel::StageCtxPtr BertModel::make_stage_ctx() const {
  return StageCtxPtr(new StageCtx(store_.device()));
}

void BertModel::release_stage(StageCtx& sc) const {
  sc.release();
}

Tensor BertModel::forward_stage(StageCtx& sc, const BertBatch& host_batch, const Tensor& input,
                                bool train, uint64_t seed) {
  Ctx& ctx = sc.start();
  const BertBatch batch = on_device(host_batch, sc.arena());
  const DropoutScope scope = stage_dropout(train, seed, batch.iteration, batch.first_sample);
  const BertEncoder::Output encoded = forward_encoder(ctx, batch, input, scope);
  if (!stage().last) return encoded.hidden;
  ctx.losses = forward_losses(ctx, batch, encoded);
  return Tensor();
}

BertLosses BertModel::stage_losses(const StageCtx& sc) const {
  MT_CHECK(stage().last && sc.started(),
           "stage_losses: only the last stage computes the losses, after forward_stage");
  return sc.state("stage_losses").losses;
}

Tensor BertModel::backward_stage(StageCtx& sc, const Tensor& grad_output, float grad_scale) {
  Ctx& ctx = sc.state("backward_stage");
  if (stage().last) return backward(ctx, grad_scale);
  const Shape expected = {ctx.encoder.seq / encoder_.sequence_shards(), ctx.encoder.batch,
                          config_.hidden_size};
  MT_CHECK(grad_output.shape() == expected && grad_output.dtype() == weights_.dtype(),
           "a BERT stage's output gradient must be [", expected[0], ", ", expected[1], ", ",
           expected[2], "] in ", dtype_name(weights_.dtype()), ", got ", grad_output.describe());
  return backward(ctx, grad_scale, grad_output);
}

BertLosses BertModel::forward_backward(const BertBatch& host_batch, float grad_scale,
                                       uint64_t seed) {
  check_whole("forward_backward");
  arena_.reset();
  const BertBatch batch = on_device(host_batch, arena_);
  Ctx ctx(arena_);
  const DropoutScope scope{true, seed, batch.iteration, batch.first_sample};
  const BertLosses losses =
      forward_losses(ctx, batch, forward_encoder(ctx, batch, Tensor(), scope));
  backward(ctx, grad_scale);
  return losses;
}

BertLosses BertModel::forward_loss(const BertBatch& host_batch) {
  check_whole("forward_loss");
  arena_.reset();
  const BertBatch batch = on_device(host_batch, arena_);
  Ctx ctx(arena_);
  return forward_losses(ctx, batch, forward_encoder(ctx, batch, Tensor(), DropoutScope{}));
}

BertOutputs BertModel::forward_logits(const Tensor& tokens, const Tensor& token_types,
                                      const Tensor& pad_mask) {
  check_whole("forward_logits");
  arena_.reset();
  Ctx ctx(arena_);
  BertBatch host_batch;
  host_batch.tokens = tokens;
  host_batch.token_types = token_types;
  host_batch.pad_mask = pad_mask;
  const BertBatch batch = on_device(host_batch, arena_);
  const BertEncoder::Output encoded = forward_encoder(ctx, batch, Tensor(), DropoutScope{});
  const Tensor& hidden = encoded.hidden;  // [s, b, h]
  const int64_t s = ctx.encoder.seq, b = ctx.encoder.batch, h = config_.hidden_size;
  Tensor local = lm_head_->forward(ctx.lm_head, hidden.view({s * b, h}), arena_);  // [s·b, V/t]
  Tensor full = gather_last_dim(*ps_.tp, local, arena_);  // [s·b, V_padded]
  BertOutputs out;
  out.mlm_logits = Tensor::empty({b, s, config_.vocab_size}, DType::F32, store_.device());
  kernels::copy(
      full.view({s, b, config_.padded_vocab_size}).slice(2, 0, config_.vocab_size).transpose(0, 1),
      out.mlm_logits);
  if (binary_head_)
    out.sop_logits = binary_head_->forward(ctx.binary, encoded.pooled, arena_).clone();
  return out;
}

}  // namespace megatron
