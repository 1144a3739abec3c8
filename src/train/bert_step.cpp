#include "train/bert_step.h"

#include <optional>

#include "data/bert_data_loader.h"
#include "model/bert_model.h"
#include "train/checkpoint_convert_bert.h"
#include "train/model_step_common.h"

namespace megatron {

namespace {

// The BERT loader's micro-batch (host tensors) as the model's batch: the model uploads what
// it reads in one copy.
BertBatch to_batch(const BertMicroBatch& mb, int64_t iteration) {
  BertBatch b;
  b.tokens = mb.tokens;
  b.token_types = mb.token_types;
  b.pad_mask = mb.pad_mask;
  b.masked_rows = mb.masked.rows;
  b.masked_labels = mb.masked.labels;
  b.masked_weights = mb.masked.weights;
  b.sop_labels = mb.sop_labels;
  b.first_sample = mb.first_sample;
  b.iteration = iteration;
  return b;
}

LossTerms terms(const BertLosses& l) {
  return {l.lm, l.sop};
}

class BertStep final : public ModelStep {
 public:
  BertStep(BertConfig config, std::shared_ptr<const BertSampleSource> train,
           std::shared_ptr<const BertSampleSource> valid,
           std::shared_ptr<const BertSampleSource> test, const ParallelState& ps,
           ParameterStore& store)
      : cfg_(std::move(config)),
        train_source_(std::move(train)),
        valid_source_(std::move(valid)),
        test_source_(std::move(test)),
        model_(cfg_, ps, store) {}

  void init_weights(uint64_t seed) override { model_.init_weights(seed); }
  void refresh_compute_weights() override { model_.refresh_compute_weights(); }

  nlohmann::json shape_json() const override { return bert_model_shape_json(cfg_); }
  bool has_sop_loss() const override { return cfg_.binary_head; }
  int64_t seq_length() const override { return cfg_.seq_length; }
  // Megatron's transformer FLOP formula; the MLM head scores only masked rows, so its
  // vocabulary term overstates BERT's work a little.
  double flops_per_iteration(int64_t global_batch) const override {
    return config_flops_per_iteration(cfg_, global_batch);
  }

  bool has_validation_data() const override { return valid_source_ != nullptr; }
  void start_training_data(const LoaderPlacement& p) override {
    train_.emplace(train_source_, placed_loader_options<BertDataLoaderOptions>(p));
  }
  void start_validation_data(const LoaderPlacement& p) override {
    valid_.emplace(valid_source_, placed_loader_options<BertDataLoaderOptions>(p));
  }
  bool has_test_data() const override { return test_source_ != nullptr; }
  void start_test_data(const LoaderPlacement& p) override {
    valid_.emplace(test_source_, placed_loader_options<BertDataLoaderOptions>(p));
  }

  LossTerms train_micro_batch(float grad_scale, uint64_t seed, int64_t iteration) override {
    return terms(model_.forward_backward(to_batch(train_->next(), iteration), grad_scale, seed));
  }
  LossTerms valid_micro_batch(int64_t iteration) override {
    return terms(model_.forward_loss(to_batch(valid_->next(), iteration)));
  }

 private:
  BertConfig cfg_;
  std::shared_ptr<const BertSampleSource> train_source_, valid_source_, test_source_;
  BertModel model_;
  std::optional<BertDataLoader> train_, valid_;  // valid_: the evaluation loader (valid or test)
};

}  // namespace

ModelStepFactory bert_step_factory(BertConfig config, std::shared_ptr<const BertSampleSource> train,
                                   std::shared_ptr<const BertSampleSource> valid,
                                   std::shared_ptr<const BertSampleSource> test) {
  return model_step_factory<BertStep>(std::move(config), std::move(train), std::move(valid),
                                      std::move(test));
}

}  // namespace megatron
