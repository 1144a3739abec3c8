#include "model/gpt_model.h"

#include <algorithm>

#include "core/upload.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "model/tied_word_embedding.h"
#include "parallel/context_parallel_layout.h"
#include "parallel/mappings.h"

namespace megatron {

struct GptModel::Ctx {
  explicit Ctx(Arena& a) : arena(a) {}
  Arena& arena;  // this micro-batch's activations
  int64_t seq = 0, batch = 0;
  InputEmbedding::Ctx embedding;
  Transformer::Ctx transformer;
  Tensor hidden;  // LM head input [s·b, h]
  VocabParallelCrossEntropyCtx cross_entropy;
  Tensor loss_mask;  // f32 [s·b]
  double mask_sum = 0;
  float loss = 0;                  // the last stage's forward_stage
  LossSum loss_sum;                // the same before normalisation
  Distillation::Ctx distillation;  // with a distillation teacher
  bool distilled = false;          // forward_stage ran the distillation losses
  // Multi-token prediction (training forwards only): the depths, and each depth's head.
  MultiTokenPrediction::Ctx mtp;
  struct MtpHead {
    Tensor input;  // the head's input [s·b, h]
    VocabParallelCrossEntropyCtx cross_entropy;
    Tensor loss_mask;  // f32 [s·b], shifted
    LossSum loss;
  };
  std::vector<MtpHead> mtp_heads;  // empty: no MTP in the last forward
};

class GptModel::StageCtx : public StageContext<Ctx> {
 public:
  using StageContext::StageContext;
};
template struct StageDelete<GptModel::StageCtx>;

namespace {

// Σ(loss·mask)/Σ(mask), 0 when nothing is scored.
float mean_loss(const LossSum& loss) {
  return loss.count > 0 ? float(loss.sum / loss.count) : 0.0f;
}

InputEmbeddingConfig input_embedding_config(const GptConfig& c) {
  return {.model_name = "GPT",
          .vocab_size = c.vocab_size,
          .padded_vocab_size = c.padded_vocab_size,
          .hidden_size = c.hidden_size,
          .max_position_embeddings = c.max_position_embeddings,
          .num_tokentypes = 0,
          .learned_positions = c.arch.position_embedding == PositionEmbedding::kLearnedAbsolute,
          .init_method_std = c.init_method_std,
          .output_mult = c.embedding_mult(),
          .hidden_dropout = c.hidden_dropout,
          .layernorm = false,
          .layernorm_epsilon = c.layernorm_epsilon,
          .sequence_parallel = c.sequence_parallel};
}

std::optional<InputEmbedding> first_stage_embedding(const GptConfig& c, const StageRange& stage,
                                                    const ParallelState& ps, ParameterStore& store,
                                                    const ComputeWeights& weights) {
  if (!stage.first) return std::nullopt;
  return std::optional<InputEmbedding>(std::in_place, input_embedding_config(c), ps, store,
                                       weights);
}

// The last stage's copy of the word embedding for the tied LM head; none with an untied
// output layer, nor with MTP (whose copy of the whole input embedding the head reads).
std::optional<VocabParallelEmbedding> head_embedding_copy(const GptConfig& c,
                                                          const StageRange& stage,
                                                          const ParallelState& ps,
                                                          ParameterStore& store,
                                                          const ComputeWeights& weights) {
  if (c.arch.untie_embeddings_and_output_weights || c.arch.mtp.enabled()) return std::nullopt;
  return tied_word_embedding_copy(input_embedding_config(c), stage, ps, store, weights);
}

// With MTP, the last stage of a split model embeds the shifted tokens itself: a copy of the
// input embedding (word and position tables, same names, same init), tied to the first
// stage's (StageTie) so that both take the same steps. Megatron shares the word table the same
// way; its position table (learned positions) it leaves untied, which would make the loss
// depend on the pipeline layout.
std::optional<InputEmbedding> mtp_embedding_copy(const GptConfig& c, const StageRange& stage,
                                                 const ParallelState& ps, ParameterStore& store,
                                                 const ComputeWeights& weights) {
  if (!c.arch.mtp.enabled() || stage.whole() || !(stage.first || stage.last)) return std::nullopt;
  const InputEmbeddingConfig e = input_embedding_config(c);
  std::vector<std::string> tables = {word_embedding_config(e).name + ".weight"};
  if (e.learned_positions) tables.push_back("embedding.position_embeddings.weight");
  std::optional<InputEmbedding> copy;
  if (stage.last) copy.emplace(e, ps, store, weights);
  for (const std::string& name : tables)
    store.set_stage_tie(name, stage.last ? StageTie::kCopy : StageTie::kOriginal);
  return copy;
}

}  // namespace

TransformerConfig GptConfig::transformer_config() const {
  TransformerConfig t = *this;
  t.attn_mask_type = AttnMaskType::kCausal;
  t.layernorm_order = LayerNormOrder::kPreLayerNorm;
  t.apply_residual_connection_post_layernorm = false;
  t.final_layernorm = true;
  return t;
}

void GptConfig::validate(int tp_size) const {
  validate_language_model(transformer_config(), tp_size, "GptModel");
  MT_REQUIRE(arch.mtp.num_layers >= 0, "--mtp-num-layers must be at least 1");
  MT_REQUIRE(!arch.mtp.enabled() || seq_length > arch.mtp.num_layers, "--mtp-num-layers ",
             arch.mtp.num_layers,
             " needs a --seq-length above it (depth k shifts the input k "
             "places), got ",
             seq_length);
  MT_REQUIRE(!per_token_loss || !arch.dsa.enabled || arch.dsa.loss_coeff == 0,
             "--calculate-per-token-loss with DSA's indexer loss (--dsa-indexer-loss-coeff > 0) "
             "is not implemented: drop one of them");
}

GptModel::GptModel(const GptConfig& config, const ParallelState& ps, ParameterStore& store,
                   StageRange stage)
    : config_(config),
      ps_(ps),
      store_(store),
      stage_(stage),
      weights_((config.validate(ps.tp_size), store), config.compute_dtype),
      embedding_(first_stage_embedding(config, stage, ps, store, weights_)),
      head_embedding_(head_embedding_copy(config, stage, ps, store, weights_)),
      mtp_embedding_(mtp_embedding_copy(config, stage, ps, store, weights_)),
      transformer_(config.transformer_config(), ps, store, weights_,
                   {stage.first_layer, stage.num_layers, stage.last}),
      arena_(store.device()),
      scratch_(store.device()) {
  MT_CHECK(store.tp_size() == ps.tp_size && store.tp_rank() == ps.tp_rank,
           "the ParameterStore was made for TP rank ", store.tp_rank(), " of ", store.tp_size(),
           ", the parallel state is rank ", ps.tp_rank, " of ", ps.tp_size);
  // The MTP depths follow the decoder on the last stage (Megatron registers them before the
  // output layer).
  if (config.arch.mtp.enabled() && stage.last)
    mtp_.emplace(config.transformer_config(), ps, store, weights_);
  // The untied output layer belongs to the last stage, like the LM head it is.
  if (config.arch.untie_embeddings_and_output_weights && stage.last)
    output_layer_index_ = store.add({.name = "output_layer.weight",
                                     .full_shape = {config.padded_vocab_size, config.hidden_size},
                                     .partition_dim = 0,
                                     .vocab_rows = config.vocab_size,
                                     .embedding_or_output = true,
                                     .embedding = true});
}

const Tensor& GptModel::lm_head_weight() const {
  return output_layer_index_ ? weights_.weight(*output_layer_index_) : head_embedding().weight();
}

Tensor& GptModel::lm_head_grad() const {
  return output_layer_index_ ? weights_.grad(*output_layer_index_) : head_embedding().weight_grad();
}

GptModel::~GptModel() = default;

void GptModel::init_weights(uint64_t seed) {
  if (embedding_) embedding_->init_weights(store_, seed);
  if (head_embedding_) head_embedding_->init_weights(store_, seed);
  if (mtp_embedding_) mtp_embedding_->init_weights(store_, seed);
  transformer_.init_weights(store_, seed);
  if (mtp_) mtp_->init_weights(store_, seed);
  if (output_layer_index_)
    init_normal(store_.params()[*output_layer_index_], seed, config_.init_method_std);
  refresh_compute_weights();
}

void GptModel::refresh_compute_weights() {
  weights_.refresh();
}

const InputEmbedding& GptModel::embedding() const {
  MT_CHECK(embedding_.has_value(), "this GPT stage (layers from ", stage_.first_layer,
           ") is not the first pipeline stage: it has no input embedding");
  return *embedding_;
}

const VocabParallelEmbedding& GptModel::head_embedding() const {
  MT_CHECK(stage_.last, "this GPT stage (layers from ", stage_.first_layer,
           ") is not the last pipeline stage: it has no LM head");
  MT_CHECK(!output_layer_index_, "the LM head is the untied output layer, not the word embedding");
  if (embedding_) return embedding_->word_embeddings();
  return mtp_embedding_ ? mtp_embedding_->word_embeddings() : *head_embedding_;
}

const InputEmbedding& GptModel::mtp_embedding() const {
  MT_CHECK(mtp_.has_value(), "this GPT stage has no multi-token prediction");
  return embedding_ ? *embedding_ : *mtp_embedding_;
}

int64_t GptModel::sequence_shards() const {
  return config_.sequence_parallel ? ps_.tp_size : 1;
}

Shape GptModel::stage_activation_shape(int64_t micro_batch) const {
  return {config_.seq_length / ps_.cp_size / sequence_shards(), micro_batch, config_.hidden_size};
}

Tensor GptModel::forward_hidden(Ctx& ctx, const Tensor& input, const DropoutScope& scope) {
  Tensor x;
  if (stage_.first) {
    x = embedding_->forward(ctx.embedding, input, Tensor(), scope, ctx.arena);
    ctx.seq = ctx.embedding.seq;
    ctx.batch = ctx.embedding.batch;
  } else {
    MT_CHECK(input.dim() == 3 && input.size(2) == config_.hidden_size &&
                 input.dtype() == weights_.dtype(),
             "a GPT stage's input must be the previous stage's output [s, b, ", config_.hidden_size,
             "] (s/t with sequence parallelism) in ", dtype_name(weights_.dtype()), ", got ",
             input.describe());
    ctx.seq = input.size(0) * sequence_shards();
    ctx.batch = input.size(1);
    x = input;
  }
  return transformer_.forward(ctx.transformer, x, Tensor(), scope, ctx.arena, scratch_);
}

Tensor GptModel::head_logits(Ctx& ctx, const Tensor& hidden, Tensor& input) {
  const int64_t s = ctx.seq, b = ctx.batch, h = config_.hidden_size;
  // LM head (tied to the word embedding unless untied): the input enters the TP region (f, or
  // with sequence parallelism ḡ: the sequence is all-gathered), each rank computes its
  // vocabulary shard of the logits, in f32 for the cross-entropy.
  input = TpRegionInput::forward(*ps_.tp, hidden, config_.sequence_parallel, ctx.arena)
              .view({s * b, h});
  const Tensor& table = lm_head_weight();                               // [V/t, h]
  Tensor logits = ctx.arena.alloc({s * b, table.size(0)}, DType::F32);  // [s·b, V/t]
  kernels::gemm(input, false, table, true, logits, config_.logit_mult());
  return logits;
}

Tensor GptModel::head_backward(Ctx& ctx, Tensor dlogits, const Tensor& input) {
  const int64_t n = ctx.seq * ctx.batch, h = config_.hidden_size;
  if (weights_.dtype() != DType::F32) {
    Tensor cast = ctx.arena.alloc(dlogits.shape(), weights_.dtype());
    kernels::cast(dlogits, cast);
    dlogits = cast;
  }
  const Tensor& table = lm_head_weight();  // [V/t, h]
  // The logits are logit_mult() · hidden · tableᵀ (muP's output multiplier; 1 without).
  const float mult = config_.logit_mult();
  kernels::gemm(dlogits, true, input, false, lm_head_grad(), mult, 1.0f);
  Tensor dfull = ctx.arena.alloc({ctx.seq, ctx.batch, h}, weights_.dtype());  // [s, b, h]
  Tensor dfull2 = dfull.view({n, h});
  kernels::gemm(dlogits, false, table, false, dfull2, mult);
  return TpRegionInput::backward(*ps_.tp, dfull, config_.sequence_parallel, ctx.arena);
}

void GptModel::forward_mtp(Ctx& ctx, const GptBatch& batch, const Tensor& hidden,
                           const DropoutScope& scope) {
  const std::vector<Tensor> outputs =
      mtp_->forward(ctx.mtp, hidden, batch.tokens, mtp_embedding(), scope, ctx.arena, scratch_);
  const int64_t n = ctx.seq * ctx.batch;
  const Tensor labels = to_seq_major(batch.labels, ctx.arena);  // [s, b]
  const Tensor mask = to_seq_major(batch.loss_mask, ctx.arena);
  ctx.mtp_heads.assign(outputs.size(), {});
  for (size_t k = 0; k < outputs.size(); ++k) {
    Ctx::MtpHead& head = ctx.mtp_heads[k];
    const Tensor logits = head_logits(ctx, outputs[k], head.input);
    const int64_t shift = int64_t(k) + 1;
    const Tensor shifted_labels = shift_sequence_left(labels, shift, ctx.arena).view({n});
    head.loss_mask = shift_sequence_left(mask, shift, ctx.arena).view({n});
    const Tensor losses = vocab_parallel_cross_entropy_forward(
        head.cross_entropy, *ps_.tp, logits, shifted_labels, config_.vocab_size, ctx.arena);
    const kernels::WeightedSum sum = kernels::weighted_sum(losses, head.loss_mask);
    head.loss = LossSum{sum.weighted, sum.weights};
  }
}

void GptModel::backward_mtp(Ctx& ctx, float grad_scale, Tensor& dhidden) {
  const int64_t n = ctx.seq * ctx.batch;
  // Megatron's MTPLossAutoScaler: depth k's loss Σ(loss·mask_k)/max(Σ mask_k, 1), × the factor
  // over the depths, with the main loss's gradient scale; with the per-token loss its masked sum
  // × Σ mask / max(Σ mask_k, 1), so the trainer's division by the batch's tokens scales it right.
  const double factor = double(config_.arch.mtp.loss_scaling_factor) / double(ctx.mtp_heads.size());
  std::vector<Tensor> douts;
  for (Ctx::MtpHead& head : ctx.mtp_heads) {
    const double count = std::max(head.loss.count, 1.0);
    const double tokens = config_.per_token_loss ? ctx.mask_sum : 1.0;
    Tensor dloss = ctx.arena.alloc({n}, DType::F32);  // [s·b]
    kernels::copy(head.loss_mask, dloss);
    kernels::scale(dloss, float(double(grad_scale) * factor * tokens / count));
    douts.push_back(head_backward(
        ctx, vocab_parallel_cross_entropy_backward(head.cross_entropy, dloss), head.input));
  }
  const Tensor dmain =
      mtp_->backward(ctx.mtp, std::move(douts), mtp_embedding(), grad_scale, ctx.arena, scratch_);
  kernels::axpy(1.0f, dmain, dhidden);
}

Tensor GptModel::forward_to_logits(Ctx& ctx, const Tensor& tokens, const DropoutScope& scope) {
  MT_CHECK(stage_.whole(), "this GptModel holds one pipeline stage, not the whole model");
  return head_logits(ctx, forward_hidden(ctx, tokens, scope), ctx.hidden);
}

LossSum GptModel::forward_loss_from_logits(Ctx& ctx, const GptBatch& batch, const Tensor& logits) {
  const Shape bs = {ctx.batch, ctx.seq};
  check_shape(batch.labels, bs, "GPT labels");
  check_dtype(batch.labels, DType::I32, "GPT labels");
  check_shape(batch.loss_mask, bs, "GPT loss mask");
  check_dtype(batch.loss_mask, DType::F32, "GPT loss mask");
  Tensor labels = to_seq_major(batch.labels, ctx.arena).view({ctx.seq * ctx.batch});
  ctx.loss_mask = to_seq_major(batch.loss_mask, ctx.arena).view({ctx.seq * ctx.batch});
  Tensor losses = vocab_parallel_cross_entropy_forward(ctx.cross_entropy, *ps_.tp, logits, labels,
                                                       config_.vocab_size, ctx.arena);
  const kernels::WeightedSum sum = kernels::weighted_sum(losses, ctx.loss_mask);
  // A context-parallel rank scored its chunks only: the mean is over the whole sequences, so
  // the sums (host scalars) add up over the CP group, and each rank's backward seeds its
  // tokens with 1 / (the whole Σ mask) — the ranks' gradients add up to the mean's.
  double sums[2] = {sum.weighted, sum.weights};
  if (ps_.cp_size > 1) {
    Tensor t = Tensor::from_blob(sums, {2}, DType::F64);
    ps_.cp->all_reduce(t);
  }
  ctx.mask_sum = sums[1];
  return LossSum{sums[0], sums[1]};
}

Tensor GptModel::backward(Ctx& ctx, float grad_scale, Tensor dhidden) {
  const int64_t n = ctx.seq * ctx.batch;
  if (stage_.last) {
    // dloss = mask · grad_scale / Σ mask (the mean's gradient), or with the per-token loss
    // mask · grad_scale (the sum's); with distillation times the LM loss's weight in the
    // total, the other terms' gradients joining the logits' and the final norm output's.
    const float dscale = config_.per_token_loss ? grad_scale
                         : ctx.mask_sum > 0     ? float(double(grad_scale) / ctx.mask_sum)
                                                : 0.0f;
    const float lm_weight = ctx.distilled ? float(ctx.distillation.weights.lm) : 1.0f;
    Tensor dloss = ctx.arena.alloc({n}, DType::F32);  // [s·b]
    kernels::copy(ctx.loss_mask, dloss);
    kernels::scale(dloss, dscale * lm_weight);
    Tensor dlogits = vocab_parallel_cross_entropy_backward(ctx.cross_entropy, dloss);  // f32
    if (ctx.distilled) distillation_->backward_logits(ctx.distillation, dscale, dlogits, ctx.arena);
    dhidden = head_backward(ctx, dlogits, ctx.hidden);
    if (ctx.distilled) distillation_->backward_hidden(ctx.distillation, dscale, dhidden, ctx.arena);
    if (!ctx.mtp_heads.empty()) backward_mtp(ctx, grad_scale, dhidden);
    // An untied output layer is complete now (the MTP heads included); a tied one (the word
    // embedding) is not announced: reduced after the backward.
    if (output_layer_index_)
      store_.grads_accumulated(*output_layer_index_, *output_layer_index_ + 1);
  }

  // [s, b, h], or this rank's sequence shard [s/t, b, h]
  ctx.transformer.aux_loss_grad_scale = grad_scale;
  Tensor dembedded = transformer_.backward(ctx.transformer, dhidden, ctx.arena, scratch_);
  if (!stage_.first) return dembedded;
  embedding_->backward(ctx.embedding, dembedded, ctx.arena);
  return Tensor();
}

GptBatch GptModel::on_device(const GptBatch& batch, Arena& arena) const {
  GptBatch b = batch;
  std::vector<Tensor> moved = upload({batch.tokens, batch.labels, batch.loss_mask}, arena);
  b.tokens = moved[0];
  b.labels = moved[1];
  b.loss_mask = moved[2];
  if (ps_.cp_size == 1) return b;
  // Context parallelism: this rank's chunks of every [b, s] input.
  for (Tensor* t : {&b.tokens, &b.labels, &b.loss_mask}) {
    if (!t->defined()) continue;
    MT_CHECK(t->dim() == 2, "GPT batch inputs must be [b, s], got ", t->describe());
    const ContextParallelLayout layout =
        ContextParallelLayout::of(t->size(1), ps_.cp_size, ps_.cp_rank);
    Tensor local = arena.alloc({t->size(0), layout.local_seq()}, t->dtype());
    layout.take_local(*t, local);
    *t = local;
  }
  return b;
}

GptModel::StageCtxPtr GptModel::make_stage_ctx() const {
  return StageCtxPtr(new StageCtx(store_.device()));
}

void GptModel::release_stage(StageCtx& sc) const {
  sc.release();
}

Tensor GptModel::forward_stage(StageCtx& sc, const GptBatch& host_batch, const Tensor& input,
                               bool train, uint64_t seed) {
  Ctx& ctx = sc.start();
  const GptBatch batch = on_device(host_batch, sc.arena());
  const DropoutScope scope = stage_dropout(train, seed, batch.iteration, batch.first_sample);
  Tensor hidden = forward_hidden(ctx, stage_.first ? batch.tokens : input, scope);
  if (!stage_.last) return hidden;
  const Tensor logits = head_logits(ctx, hidden, ctx.hidden);
  ctx.loss_sum = forward_loss_from_logits(ctx, batch, logits);
  ctx.mtp_heads.clear();
  // The depths only train: their losses join the gradient and are logged in training.
  if (mtp_ && train) forward_mtp(ctx, batch, hidden, scope);
  ctx.loss = mean_loss(ctx.loss_sum);
  ctx.distilled = distillation_ != nullptr;
  if (ctx.distilled)
    distillation_->forward(ctx.distillation, batch, hidden, logits, ctx.loss_mask, ctx.loss_sum.sum,
                           train, sc.arena());
  return Tensor();
}

void GptModel::set_distillation(Distillation* distillation) {
  MT_REQUIRE(distillation == nullptr || !config_.arch.mtp.enabled(),
             "knowledge distillation (--export-kd-teacher-load) with multi-token prediction "
             "(--mtp-num-layers) is not implemented: drop one of them");
  MT_REQUIRE(distillation == nullptr || (stage_.whole() && ps_.cp_size == 1),
             "knowledge distillation (--export-kd-teacher-load) runs with "
             "--pipeline-model-parallel-size 1 and --context-parallel-size 1 only");
  distillation_ = distillation;
}

const DistillationLossTerms& GptModel::stage_distillation(const StageCtx& sc) const {
  const Ctx& ctx = sc.state("stage_distillation");
  MT_CHECK(ctx.distilled, "stage_distillation: only a distilled last stage has its terms");
  return ctx.distillation.losses;
}

size_t GptModel::stage_activation_bytes(const StageCtx& sc) const {
  return sc.activation_bytes();
}

float GptModel::stage_loss(const StageCtx& sc) const {
  MT_CHECK(stage_.last && sc.started(),
           "stage_loss: only the last stage computes the loss, after forward_stage");
  return sc.state("stage_loss").loss;
}

double GptModel::stage_indexer_loss(const StageCtx& sc) const {
  return sc.state("stage_indexer_loss").transformer.aux_loss;
}

LossSum GptModel::stage_loss_sum(const StageCtx& sc) const {
  MT_CHECK(stage_.last && sc.started(),
           "stage_loss_sum: only the last stage computes the loss, after forward_stage");
  return sc.state("stage_loss_sum").loss_sum;
}

MoeLosses GptModel::stage_moe_losses(const StageCtx& sc) const {
  const Ctx& ctx = sc.state("stage_moe_losses");
  MoeLosses losses = ctx.transformer.moe_losses;
  if (!ctx.mtp_heads.empty()) losses += ctx.mtp.moe_losses;
  return losses;
}

std::vector<double> GptModel::stage_mtp_losses(const StageCtx& sc) const {
  std::vector<double> losses;
  for (const Ctx::MtpHead& head : sc.state("stage_mtp_losses").mtp_heads)
    losses.push_back(head.loss.count > 0 ? head.loss.sum / head.loss.count : 0.0);
  return losses;
}

Tensor GptModel::backward_stage(StageCtx& sc, const Tensor& grad_output, float grad_scale) {
  Ctx& ctx = sc.state("backward_stage");
  if (stage_.last) return backward(ctx, grad_scale);
  const int64_t s_local = ctx.seq / sequence_shards();
  MT_CHECK(grad_output.shape() == Shape({s_local, ctx.batch, config_.hidden_size}) &&
               grad_output.dtype() == weights_.dtype(),
           "a GPT stage's output gradient must be [", s_local, ", ", ctx.batch, ", ",
           config_.hidden_size, "] in ", dtype_name(weights_.dtype()), ", got ",
           grad_output.describe());
  return backward(ctx, grad_scale, grad_output);
}

float GptModel::forward_backward(const GptBatch& host_batch, float grad_scale, uint64_t seed) {
  arena_.reset();
  const GptBatch batch = on_device(host_batch, arena_);
  Ctx ctx(arena_);
  const DropoutScope scope{true, seed, batch.iteration, batch.first_sample};
  MT_CHECK(stage_.whole(), "this GptModel holds one pipeline stage, not the whole model");
  const Tensor hidden = forward_hidden(ctx, batch.tokens, scope);
  const Tensor logits = head_logits(ctx, hidden, ctx.hidden);
  const float loss = mean_loss(forward_loss_from_logits(ctx, batch, logits));
  if (mtp_) forward_mtp(ctx, batch, hidden, scope);
  backward(ctx, grad_scale);
  return loss;
}

float GptModel::forward_loss(const GptBatch& batch) {
  return mean_loss(forward_loss_sum(batch));
}

LossSum GptModel::forward_loss_sum(const GptBatch& host_batch) {
  arena_.reset();
  const GptBatch batch = on_device(host_batch, arena_);
  Ctx ctx(arena_);
  Tensor logits = forward_to_logits(ctx, batch.tokens, DropoutScope{});
  return forward_loss_from_logits(ctx, batch, logits);
}

Tensor GptModel::forward_logits(const Tensor& host_tokens) {
  MT_CHECK(ps_.cp_size == 1, "full logits are computed with --context-parallel-size 1 only");
  arena_.reset();
  const Tensor tokens = upload({host_tokens}, arena_)[0];
  Ctx ctx(arena_);
  Tensor local = forward_to_logits(ctx, tokens, DropoutScope{});  // [s·b, V/t]
  Tensor full = gather_last_dim(*ps_.tp, local, arena_);          // [s·b, V_padded]
  const int64_t s = ctx.seq, b = ctx.batch;
  Tensor out = Tensor::empty({b, s, config_.vocab_size}, DType::F32, store_.device());
  kernels::copy(
      full.view({s, b, config_.padded_vocab_size}).slice(2, 0, config_.vocab_size).transpose(0, 1),
      out);
  return out;
}

GptModel::Outputs GptModel::forward_outputs(const GptBatch& host_batch) {
  MT_CHECK(stage_.whole(), "forward_outputs needs the whole GPT model, not one pipeline stage");
  arena_.reset();
  const GptBatch batch = on_device(host_batch, arena_);
  Ctx ctx(arena_);
  Outputs out;
  out.hidden = forward_hidden(ctx, batch.tokens, DropoutScope{});
  out.logits = head_logits(ctx, out.hidden, ctx.hidden);
  return out;
}

InferenceCtx GptModel::make_inference_ctx(int64_t batch, int64_t max_seq) const {
  MT_CHECK(ps_.cp_size == 1, "inference runs with --context-parallel-size 1 only");
  MT_CHECK(max_seq >= 1 && max_seq <= config_.max_position_embeddings, "inference length ", max_seq,
           " must be in [1, --max-position-embeddings = ", config_.max_position_embeddings, "]");
  // Keys and values of this rank's KV groups: g/t, or the one group its heads use when g < t.
  const TransformerConfig t = config_.transformer_config();
  const int64_t kv_heads_local = std::max<int64_t>(1, t.query_groups() / ps_.tp_size);
  InferenceCtx ctx{KvCache(config_.num_layers, batch, kv_heads_local, max_seq, t.head_dim(),
                           weights_.dtype(), store_.device()),
                   Arena(store_.device()), Arena(store_.device())};
  return ctx;
}

int64_t GptModel::vocab_start() const {
  return int64_t(ps_.tp_rank) * (config_.padded_vocab_size / ps_.tp_size);
}

Tensor GptModel::forward_step(InferenceCtx& ctx, const Tensor& host_tokens, bool all_positions) {
  return forward_cached(ctx, ctx.cache.all_rows(), host_tokens, all_positions);
}

Tensor GptModel::forward_rows(InferenceCtx& ctx, const std::vector<int64_t>& slots,
                              const Tensor& host_tokens, bool all_positions) {
  CacheRows rows;
  std::vector<char> taken(size_t(ctx.batch()), 0);
  for (int64_t slot : slots) {
    MT_CHECK(slot >= 0 && slot < ctx.batch() && !taken[size_t(slot)], "cache row ", slot,
             " is outside the inference context's ", ctx.batch(), " rows or repeated");
    taken[size_t(slot)] = 1;
    rows.slots.push_back(slot);
    rows.starts.push_back(ctx.cache.length(slot));
  }
  return forward_cached(ctx, rows, host_tokens, all_positions);
}

Tensor GptModel::forward_cached(InferenceCtx& ctx, const CacheRows& rows, const Tensor& host_tokens,
                                bool all_positions) {
  MT_CHECK(stage_.whole(), "inference needs the whole GPT model, not one pipeline stage");
  MT_CHECK(!config_.sequence_parallel,
           "inference runs without sequence parallelism (a training option): build the model "
           "with sequence_parallel = false");
  ctx.arena.reset();
  const Tensor tokens = upload({host_tokens}, ctx.arena)[0];
  check_dtype(tokens, DType::I32, "GPT tokens");
  MT_CHECK(tokens.dim() == 2 && tokens.size(0) == rows.size() && tokens.size(1) >= 1,
           "inference tokens must be [", rows.size(), ", s >= 1], got ", tokens.describe());
  const int64_t b = tokens.size(0), s = tokens.size(1), h = config_.hidden_size;
  for (int64_t r = 0; r < b; ++r)
    MT_CHECK(rows.starts[size_t(r)] + s <= ctx.cache.max_seq(), "positions [",
             rows.starts[size_t(r)], ", ", rows.starts[size_t(r)] + s,
             ") exceed the inference context's ", ctx.cache.max_seq());

  InputEmbedding::Ctx embedding_ctx;  // discarded: no backward
  const bool uniform = rows.whole_at(rows.starts.empty() ? 0 : rows.starts[0], ctx.batch());
  Tensor embedded = uniform
                        ? embedding().forward(embedding_ctx, tokens, Tensor(), DropoutScope{},
                                              ctx.arena, rows.starts[0])
                        : embedding().forward_rows(embedding_ctx, tokens, rows.starts, ctx.arena);
  Tensor hidden = transformer_.forward_cached(embedded, ctx.cache, rows, ctx.arena, ctx.scratch);
  ctx.cache.advance(rows, s);
  // [s, b, h] is sequence-major, so the last position's rows are contiguous.
  Tensor last = all_positions ? hidden.view({s * b, h}) : hidden.select(0, s - 1);
  const Tensor& table = lm_head_weight();  // [V/t, h]
  Tensor logits = ctx.arena.alloc({last.size(0), table.size(0)}, DType::F32);
  kernels::gemm(last, false, table, true, logits, config_.logit_mult());
  return all_positions ? logits.view({s, b, table.size(0)}) : logits;
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
