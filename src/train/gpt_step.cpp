#include "train/gpt_step.h"

#include <functional>
#include <optional>
#include <utility>

#include "data/data_loader.h"
#include "train/checkpoint_convert.h"
#include "train/model_step_common.h"
#include "train/pipeline_chunks.h"

namespace megatron {

namespace {

class GptStep final : public ModelStep {
 public:
  GptStep(GptStepConfig config, std::shared_ptr<const GptSampleSource> train,
          std::shared_ptr<const GptSampleSource> valid, std::shared_ptr<const GptSampleSource> test,
          const ParallelState& ps, ParameterStore& store)
      : cfg_((config.model.validate(ps.tp_size), std::move(config))),
        train_source_(std::move(train)),
        valid_source_(std::move(valid)),
        test_source_(std::move(test)),
        chunks_(
            cfg_.model.num_layers, ps, cfg_.pipeline_chunks,
            [&](const StageRange& stage) {
              return std::make_unique<GptModel>(cfg_.model, ps, store, stage);
            },
            [](const GptModel& model, const GptModel::StageCtx& ctx) {
              return LossTerms{model.stage_loss(ctx)};
            }) {}

  void init_weights(uint64_t seed) override {
    for (auto& chunk : chunks_.models()) chunk->init_weights(seed);
  }
  void refresh_compute_weights() override {
    for (auto& chunk : chunks_.models()) chunk->refresh_compute_weights();
  }

  nlohmann::json shape_json() const override { return gpt_model_shape_json(cfg_.model); }
  bool has_sop_loss() const override { return false; }
  int64_t seq_length() const override { return cfg_.model.seq_length; }
  double flops_per_iteration(int64_t global_batch) const override {
    return config_flops_per_iteration(cfg_.model, global_batch);
  }

  bool has_validation_data() const override { return valid_source_ != nullptr; }
  void start_training_data(const LoaderPlacement& p) override {
    train_.emplace(train_source_, loader_options(p));
    micro_batch_ = p.micro_batch;
  }
  void start_validation_data(const LoaderPlacement& p) override {
    valid_.emplace(valid_source_, loader_options(p));
    micro_batch_ = p.micro_batch;
  }
  bool has_test_data() const override { return test_source_ != nullptr; }
  void start_test_data(const LoaderPlacement& p) override {
    valid_.emplace(test_source_, loader_options(p));
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
  static std::function<GptBatch()> next_batch(GptDataLoader& loader, int64_t iteration) {
    return [&loader, iteration] {
      const GptMicroBatch mb = loader.next();
      return GptBatch{mb.tokens, mb.labels, mb.loss_mask, mb.first_sample, iteration};
    };
  }

  GptDataLoaderOptions loader_options(const LoaderPlacement& p) const {
    auto o = placed_loader_options<GptDataLoaderOptions>(p);
    o.eod_token = cfg_.eod_token;
    o.eod_mask_loss = cfg_.eod_mask_loss;
    return o;
  }

  GptStepConfig cfg_;
  std::shared_ptr<const GptSampleSource> train_source_, valid_source_, test_source_;
  PipelineChunks<GptModel, GptBatch> chunks_;   // this rank's model chunks
  std::optional<GptDataLoader> train_, valid_;  // valid_: the evaluation loader (valid or test)
  int64_t micro_batch_ = 1;
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
