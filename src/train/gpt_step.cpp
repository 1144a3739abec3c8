#include "train/gpt_step.h"

#include <memory>
#include <utility>

#include "checkpoint/model_shape.h"
#include "data/data_loader.h"
#include "train/model_step_common.h"
#include "train/pipelined_step.h"

namespace megatron {

namespace {

using GptPipelinedStep =
    PipelinedStep<GptModel, GptBatch, GptDataLoader, GptDataLoaderOptions, GptSampleSource>;

class GptStep final : public GptPipelinedStep {
 public:
  GptStep(GptStepConfig config, std::shared_ptr<const GptSampleSource> train,
          std::shared_ptr<const GptSampleSource> valid, std::shared_ptr<const GptSampleSource> test,
          const ParallelState& ps, ParameterStore& store)
      : GptPipelinedStep((config.model.validate(ps.tp_size), config.split), config.microbatch_group,
                         ps,
                         [&](const StageRange& stage) {
                           return std::make_unique<GptModel>(config.model, ps, store, stage);
                         },
                         [per_token = config.model.per_token_loss](const GptModel& model,
                                                                   const GptModel::StageCtx& ctx) {
                           if (!per_token) return LossTerms{model.stage_loss(ctx)};
                           const LossSum sum = model.stage_loss_sum(ctx);
                           return LossTerms{.lm = sum.sum, .tokens = sum.count};
                         },
                         std::move(train), std::move(valid), std::move(test)),
        cfg_(std::move(config)) {
    MT_CHECK(cfg_.split.num_layers == cfg_.model.num_layers, "the pipeline split is of ",
             cfg_.split.num_layers, " layers, the model has ", cfg_.model.num_layers);
  }

  nlohmann::json shape_json() const override { return gpt_model_shape_json(cfg_.model); }
  bool has_sop_loss() const override { return false; }
  int64_t seq_length() const override { return cfg_.model.seq_length; }
  double flops_per_iteration(int64_t global_batch) const override {
    return config_flops_per_iteration(cfg_.model, global_batch, split());
  }

 private:
  GptBatch to_batch(const GptMicroBatch& mb, int64_t iteration) const override {
    return GptBatch{mb.tokens, mb.labels, mb.loss_mask, mb.first_sample, iteration};
  }
  GptDataLoaderOptions loader_options(const LoaderPlacement& p) const override {
    auto o = placed_loader_options<GptDataLoaderOptions>(p);
    o.eod_token = cfg_.eod_token;
    o.eod_mask_loss = cfg_.eod_mask_loss;
    return o;
  }

  GptStepConfig cfg_;
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
