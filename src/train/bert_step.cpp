#include "train/bert_step.h"

#include <memory>
#include <utility>

#include "checkpoint/model_shape.h"
#include "data/bert_data_loader.h"
#include "model/bert_model.h"
#include "train/model_step_common.h"
#include "train/pipelined_step.h"

namespace megatron {

namespace {

LossTerms terms(const BertLosses& l) {
  return {l.lm, l.sop};
}

using BertPipelinedStep =
    PipelinedStep<BertModel, BertBatch, BertDataLoader, BertDataLoaderOptions, BertSampleSource>;

class BertStep final : public BertPipelinedStep {
 public:
  BertStep(BertStepConfig config, std::shared_ptr<const BertSampleSource> train,
           std::shared_ptr<const BertSampleSource> valid,
           std::shared_ptr<const BertSampleSource> test, const ParallelState& ps,
           ParameterStore& store)
      : BertPipelinedStep(
            (config.model.validate(ps.tp_size), config.split), config.microbatch_group, ps,
            [&](const StageRange& stage) {
              return std::make_unique<BertModel>(config.model, ps, store, stage);
            },
            [](const BertModel& model, const BertModel::StageCtx& ctx) {
              return model.stage().last ? terms(model.stage_losses(ctx)) : LossTerms{};
            },
            std::move(train), std::move(valid), std::move(test)),
        cfg_(std::move(config)) {
    MT_CHECK(cfg_.split.num_layers == cfg_.model.num_layers, "the pipeline split is of ",
             cfg_.split.num_layers, " layers, the model has ", cfg_.model.num_layers);
  }

  nlohmann::json shape_json() const override { return bert_model_shape_json(cfg_.model); }
  bool has_sop_loss() const override { return cfg_.model.binary_head; }
  int64_t seq_length() const override { return cfg_.model.seq_length; }
  // Megatron's transformer FLOP formula; the MLM head scores only masked rows, so its
  // vocabulary term overstates BERT's work a little.
  double flops_per_iteration(int64_t global_batch) const override {
    return config_flops_per_iteration(cfg_.model, global_batch, split());
  }

 private:
  // The loader's micro-batch (host tensors) as the model's batch: the model uploads what it
  // reads in one copy.
  BertBatch to_batch(const BertMicroBatch& mb, int64_t iteration) const override {
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

  BertStepConfig cfg_;
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
