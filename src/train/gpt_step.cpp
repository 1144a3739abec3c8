#include "train/gpt_step.h"

#include <optional>

#include "data/data_loader.h"
#include "train/checkpoint_convert.h"
#include "train/model_step_common.h"

namespace megatron {

namespace {

const GptConfig& validated(const GptConfig& config, int tp_size) {
  config.validate(tp_size);
  return config;
}

class GptStep final : public ModelStep {
 public:
  GptStep(GptStepConfig config, std::shared_ptr<const GptSampleSource> train,
          std::shared_ptr<const GptSampleSource> valid, std::shared_ptr<const GptSampleSource> test,
          const ParallelState& ps, ParameterStore& store)
      : cfg_(std::move(config)),
        train_source_(std::move(train)),
        valid_source_(std::move(valid)),
        test_source_(std::move(test)),
        model_(validated(cfg_.model, ps.tp_size), ps, store) {}

  void init_weights(uint64_t seed) override { model_.init_weights(seed); }
  void refresh_compute_weights() override { model_.refresh_compute_weights(); }

  nlohmann::json shape_json() const override { return gpt_model_shape_json(cfg_.model); }
  bool has_sop_loss() const override { return false; }
  int64_t seq_length() const override { return cfg_.model.seq_length; }
  double flops_per_iteration(int64_t global_batch) const override {
    return config_flops_per_iteration(cfg_.model, global_batch);
  }

  bool has_validation_data() const override { return valid_source_ != nullptr; }
  void start_training_data(const LoaderPlacement& p) override {
    train_.emplace(train_source_, loader_options(p));
  }
  void start_validation_data(const LoaderPlacement& p) override {
    valid_.emplace(valid_source_, loader_options(p));
  }
  bool has_test_data() const override { return test_source_ != nullptr; }
  void start_test_data(const LoaderPlacement& p) override {
    valid_.emplace(test_source_, loader_options(p));
  }

  LossTerms train_micro_batch(float grad_scale, uint64_t seed, int64_t iteration) override {
    return {model_.forward_backward(to_batch(train_->next(), iteration), grad_scale, seed)};
  }
  LossTerms valid_micro_batch(int64_t iteration) override {
    return {model_.forward_loss(to_batch(valid_->next(), iteration))};
  }

 private:
  GptDataLoaderOptions loader_options(const LoaderPlacement& p) const {
    auto o = placed_loader_options<GptDataLoaderOptions>(p);
    o.eod_token = cfg_.eod_token;
    o.eod_mask_loss = cfg_.eod_mask_loss;
    return o;
  }

  static GptBatch to_batch(const GptMicroBatch& mb, int64_t iteration) {
    return {mb.tokens, mb.labels, mb.loss_mask, mb.first_sample, iteration};
  }

  GptStepConfig cfg_;
  std::shared_ptr<const GptSampleSource> train_source_, valid_source_, test_source_;
  GptModel model_;
  std::optional<GptDataLoader> train_, valid_;  // valid_: the evaluation loader (valid or test)
};

}  // namespace

ModelStepFactory gpt_step_factory(GptStepConfig config,
                                  std::shared_ptr<const GptSampleSource> train,
                                  std::shared_ptr<const GptSampleSource> valid,
                                  std::shared_ptr<const GptSampleSource> test) {
  return model_step_factory<GptStep>(std::move(config), std::move(train), std::move(valid),
                                     std::move(test));
}

}  // namespace megatron
