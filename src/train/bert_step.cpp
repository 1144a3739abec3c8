#include "train/bert_step.h"

#include <functional>
#include <optional>
#include <utility>

#include "data/bert_data_loader.h"
#include "model/bert_model.h"
#include "train/checkpoint_convert_bert.h"
#include "train/model_step_common.h"
#include "train/pipeline_chunks.h"

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
  BertStep(BertStepConfig config, std::shared_ptr<const BertSampleSource> train,
           std::shared_ptr<const BertSampleSource> valid,
           std::shared_ptr<const BertSampleSource> test, const ParallelState& ps,
           ParameterStore& store)
      : cfg_((config.model.validate(ps.tp_size), std::move(config))),
        train_source_(std::move(train)),
        valid_source_(std::move(valid)),
        test_source_(std::move(test)),
        chunks_(
            cfg_.model.num_layers, ps, cfg_.pipeline_chunks,
            [&](const StageRange& stage) {
              return std::make_unique<BertModel>(cfg_.model, ps, store, stage);
            },
            [](const BertModel& model, const BertModel::StageCtx& ctx) {
              return terms(model.stage_losses(ctx));
            }) {}

  void init_weights(uint64_t seed) override {
    for (auto& chunk : chunks_.models()) chunk->init_weights(seed);
  }
  void refresh_compute_weights() override {
    for (auto& chunk : chunks_.models()) chunk->refresh_compute_weights();
  }

  nlohmann::json shape_json() const override { return bert_model_shape_json(cfg_.model); }
  bool has_sop_loss() const override { return cfg_.model.binary_head; }
  int64_t seq_length() const override { return cfg_.model.seq_length; }
  // Megatron's transformer FLOP formula; the MLM head scores only masked rows, so its
  // vocabulary term overstates BERT's work a little.
  double flops_per_iteration(int64_t global_batch) const override {
    return config_flops_per_iteration(cfg_.model, global_batch);
  }

  bool has_validation_data() const override { return valid_source_ != nullptr; }
  void start_training_data(const LoaderPlacement& p) override {
    train_.emplace(train_source_, placed_loader_options<BertDataLoaderOptions>(p));
    micro_batch_ = p.micro_batch;
  }
  void start_validation_data(const LoaderPlacement& p) override {
    valid_.emplace(valid_source_, placed_loader_options<BertDataLoaderOptions>(p));
    micro_batch_ = p.micro_batch;
  }
  bool has_test_data() const override { return test_source_ != nullptr; }
  void start_test_data(const LoaderPlacement& p) override {
    valid_.emplace(test_source_, placed_loader_options<BertDataLoaderOptions>(p));
    micro_batch_ = p.micro_batch;
  }

  LossTerms train_micro_batch(float grad_scale, uint64_t seed, int64_t iteration) override {
    return train_micro_batches(1, grad_scale, seed, iteration);
  }
  LossTerms valid_micro_batch(int64_t iteration) override {
    return valid_micro_batches(1, iteration);
  }
  LossTerms train_micro_batches(int64_t micro_batches, float grad_scale, uint64_t seed,
                                int64_t iteration) override {
    return chunks_.train(micro_batches, micro_batch_, next_batch(*train_, iteration), grad_scale,
                         seed);
  }
  LossTerms valid_micro_batches(int64_t micro_batches, int64_t iteration) override {
    return chunks_.evaluate(micro_batches, micro_batch_, next_batch(*valid_, iteration));
  }

 private:
  static std::function<BertBatch()> next_batch(BertDataLoader& loader, int64_t iteration) {
    return [&loader, iteration] { return to_batch(loader.next(), iteration); };
  }

  BertStepConfig cfg_;
  std::shared_ptr<const BertSampleSource> train_source_, valid_source_, test_source_;
  PipelineChunks<BertModel, BertBatch> chunks_;  // this rank's model chunks
  std::optional<BertDataLoader> train_, valid_;  // valid_: the evaluation loader (valid or test)
  int64_t micro_batch_ = 1;
};

}  // namespace

ModelStepFactory bert_step_factory(BertStepConfig config,
                                   std::shared_ptr<const BertSampleSource> train,
                                   std::shared_ptr<const BertSampleSource> valid,
                                   std::shared_ptr<const BertSampleSource> test) {
  return model_step_factory<BertStep>(std::move(config), std::move(train), std::move(valid),
                                      std::move(test));
}

}  // namespace megatron
