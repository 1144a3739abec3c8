#include "model/bert_classifier.h"

#include "core/upload.h"

namespace megatron {

namespace {

ClassificationHeadConfig head_config(const BertClassifierConfig& c) {
  return {.name = c.head_name,
          .hidden_size = c.bert.hidden_size,
          .outputs = c.multiple_choice ? 1 : c.classes,
          .choices = c.multiple_choice ? c.classes : 1,
          .dropout = c.bert.hidden_dropout,
          .init_std = c.bert.init_method_std};
}

}  // namespace

BertClassifier::BertClassifier(const BertClassifierConfig& config, const ParallelState& ps,
                               ParameterStore& store)
    : config_(config),
      store_(store),
      weights_((config.bert.validate(ps.tp_size), store), config.bert.compute_dtype),
      encoder_(config.bert, /*with_pooler=*/true, ps, store, weights_),
      head_(head_config(config), store, weights_),
      arena_(store.device()),
      scratch_(store.device()) {
  MT_CHECK(store.tp_size() == ps.tp_size && store.tp_rank() == ps.tp_rank,
           "the ParameterStore was made for TP rank ", store.tp_rank(), " of ", store.tp_size(),
           ", the parallel state is rank ", ps.tp_rank, " of ", ps.tp_size);
}

void BertClassifier::init_weights(uint64_t seed) {
  encoder_.init_weights(store_, seed);
  head_.init_weights(store_, seed);
  refresh_compute_weights();
}

void BertClassifier::refresh_compute_weights() {
  weights_.refresh();
}

ClassifierBatch BertClassifier::on_device(const ClassifierBatch& batch) {
  ClassifierBatch d = batch;
  std::vector<Tensor> moved =
      upload({batch.tokens, batch.token_types, batch.pad_mask, batch.labels}, arena_);
  d.tokens = moved[0];
  d.token_types = moved[1];
  d.pad_mask = moved[2];
  d.labels = moved[3];
  return d;
}

float BertClassifier::forward_backward(const ClassifierBatch& host_batch, float grad_scale,
                                       uint64_t seed) {
  arena_.reset();
  const ClassifierBatch batch = on_device(host_batch);
  const DropoutScope scope{true, seed, batch.iteration, batch.first_row};
  BertEncoder::Ctx encoder_ctx;
  const BertEncoder::Output encoded = encoder_.forward(encoder_ctx, batch.tokens, batch.token_types,
                                                       batch.pad_mask, scope, arena_, scratch_);
  ClassificationHead::Ctx head_ctx;
  head_.forward(head_ctx, encoded.pooled, scope, arena_);
  const float loss = head_.loss(head_ctx, batch.labels, arena_);
  const Tensor dpooled = head_.backward(head_ctx, grad_scale, arena_);  // f32 [n, h]
  const int64_t n = encoder_ctx.batch, s = encoder_ctx.seq, h = config_.bert.hidden_size;
  encoder_.backward(encoder_ctx, arena_.zeros({s, n, h}, weights_.dtype()), dpooled, arena_,
                    scratch_);
  return loss;
}

Tensor BertClassifier::forward_logits(const ClassifierBatch& host_batch) {
  arena_.reset();
  ClassifierBatch without_labels = host_batch;
  without_labels.labels = Tensor();
  const ClassifierBatch batch = on_device(without_labels);
  BertEncoder::Ctx encoder_ctx;
  const BertEncoder::Output encoded =
      encoder_.forward(encoder_ctx, batch.tokens, batch.token_types, batch.pad_mask, DropoutScope{},
                       arena_, scratch_);
  ClassificationHead::Ctx head_ctx;
  const Tensor logits = head_.forward(head_ctx, encoded.pooled, DropoutScope{}, arena_);
  Tensor host = Tensor::empty(logits.shape(), DType::F32);
  host.copy_from(logits);
  return host;
}

}  // namespace megatron
