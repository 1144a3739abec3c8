#include "model/bert_classifier.h"

#include "core/upload.h"

namespace megatron {

namespace {

// What one micro-batch's backward needs, kept from its forward_stage.
struct ClassifierState {
  BertEncoder::Ctx encoder;
  ClassificationHead::Ctx head;
  ClassifierOutput output;  // the last stage's
};

}  // namespace

class BertClassifier::StageCtx : public StageContext<ClassifierState> {
 public:
  using StageContext::StageContext;
};
template struct StageDelete<BertClassifier::StageCtx>;

namespace {

ClassificationHeadConfig head_config(const BertClassifierConfig& c) {
  return {.name = c.head_name,
          .hidden_size = c.bert.hidden_size,
          .outputs = c.multiple_choice ? 1 : c.classes,
          .choices = c.multiple_choice ? c.classes : 1,
          .dropout = c.bert.hidden_dropout,
          .init_std = c.bert.init_method_std};
}

std::optional<ClassificationHead> last_stage_head(const BertClassifierConfig& c,
                                                  const StageRange& stage, ParameterStore& store,
                                                  const ComputeWeights& weights) {
  if (!stage.last) return std::nullopt;
  return std::optional<ClassificationHead>(std::in_place, head_config(c), store, weights);
}

// The batch with its tensors on `arena`'s device (uploaded in one copy).
ClassifierBatch on_device(const ClassifierBatch& batch, Arena& arena) {
  ClassifierBatch d = batch;
  std::vector<Tensor> moved =
      upload({batch.tokens, batch.token_types, batch.pad_mask, batch.labels}, arena);
  d.tokens = moved[0];
  d.token_types = moved[1];
  d.pad_mask = moved[2];
  d.labels = moved[3];
  return d;
}

}  // namespace

BertClassifier::BertClassifier(const BertClassifierConfig& config, const ParallelState& ps,
                               ParameterStore& store, StageRange stage)
    : config_(config),
      store_(store),
      weights_((config.bert.validate(ps.tp_size), store), config.bert.compute_dtype),
      encoder_(config.bert, /*with_pooler=*/true, ps, store, weights_, stage),
      head_(last_stage_head(config, stage, store, weights_)),
      whole_(make_stage_ctx()),
      scratch_(store.device()) {
  MT_CHECK(store.tp_size() == ps.tp_size && store.tp_rank() == ps.tp_rank,
           "the ParameterStore was made for TP rank ", store.tp_rank(), " of ", store.tp_size(),
           ", the parallel state is rank ", ps.tp_rank, " of ", ps.tp_size);
}

BertClassifier::~BertClassifier() = default;

void BertClassifier::init_weights(uint64_t seed) {
  encoder_.init_weights(store_, seed);
  if (head_) head_->init_weights(store_, seed);
  refresh_compute_weights();
}

void BertClassifier::refresh_compute_weights() {
  weights_.refresh();
}

void BertClassifier::check_whole(const char* what) const {
  MT_CHECK(stage().whole(), what,
           ": this BertClassifier holds one pipeline stage, not the whole model (layers from ",
           stage().first_layer, ")");
}

BertClassifier::StageCtxPtr BertClassifier::make_stage_ctx() const {
  return StageCtxPtr(new StageCtx(store_.device()));
}

void BertClassifier::release_stage(StageCtx& ctx) const {
  ctx.release();
}

Shape BertClassifier::stage_activation_shape(int64_t micro_batch) const {
  return {config_.bert.seq_length / encoder_.sequence_shards(), micro_batch * choices(),
          config_.bert.hidden_size};
}

Tensor BertClassifier::forward_stage(StageCtx& sc, const ClassifierBatch& host_batch,
                                     const Tensor& input, bool train, uint64_t seed) {
  ClassifierState& ctx = sc.start();
  Arena& arena = sc.arena();
  const ClassifierBatch batch = on_device(host_batch, arena);
  const DropoutScope scope = stage_dropout(train, seed, batch.iteration, batch.first_row);
  const BertEncoder::Output encoded =
      encoder_.forward(ctx.encoder, stage().first ? batch.tokens : input, batch.token_types,
                       batch.pad_mask, scope, arena, scratch_);
  if (!stage().last) return encoded.hidden;
  ctx.output.logits = head_->forward(ctx.head, encoded.pooled, scope, arena);
  if (batch.labels.defined()) {
    ctx.output.labels = batch.labels;
    ctx.output.loss = head_->loss(ctx.head, batch.labels, arena);
  }
  return Tensor();
}

const ClassifierOutput& BertClassifier::stage_output(const StageCtx& sc) const {
  MT_CHECK(stage().last && sc.started(),
           "stage_output: only the last stage computes the logits, after forward_stage");
  return sc.state("stage_output").output;
}

Tensor BertClassifier::backward_stage(StageCtx& sc, const Tensor& grad_output, float grad_scale) {
  ClassifierState& ctx = sc.state("backward_stage");
  Arena& arena = sc.arena();
  const int64_t s = ctx.encoder.seq, n = ctx.encoder.batch, h = config_.bert.hidden_size;
  if (!stage().last) {
    const Shape expected = {s / encoder_.sequence_shards(), n, h};
    MT_CHECK(grad_output.shape() == expected && grad_output.dtype() == weights_.dtype(),
             "a BertClassifier stage's output gradient must be [", expected[0], ", ", expected[1],
             ", ", expected[2], "] in ", dtype_name(weights_.dtype()), ", got ",
             grad_output.describe());
    return encoder_.backward(ctx.encoder, grad_output, Tensor(), arena, scratch_);
  }
  MT_CHECK(ctx.output.labels.defined(),
           "BertClassifier backward: the micro-batch had no labels, so no loss to differentiate");
  const Tensor dpooled = head_->backward(ctx.head, grad_scale, arena);  // f32 [n, h]
  // The hidden states [s, n, h] feed nothing but the pooler: their own gradient is zero.
  return encoder_.backward(ctx.encoder, arena.zeros({s, n, h}, weights_.dtype()), dpooled, arena,
                           scratch_);
}

float BertClassifier::forward_backward(const ClassifierBatch& batch, float grad_scale,
                                       uint64_t seed) {
  check_whole("forward_backward");
  forward_stage(*whole_, batch, Tensor(), /*train=*/true, seed);
  backward_stage(*whole_, Tensor(), grad_scale);
  return whole_->state("forward_backward").output.loss;
}

Tensor BertClassifier::forward_logits(const ClassifierBatch& batch) {
  check_whole("forward_logits");
  ClassifierBatch without_labels = batch;
  without_labels.labels = Tensor();
  forward_stage(*whole_, without_labels, Tensor(), /*train=*/false, 0);
  Tensor host = Tensor::empty(stage_output(*whole_).logits.shape(), DType::F32);
  host.copy_from(stage_output(*whole_).logits);
  return host;
}

}  // namespace megatron
