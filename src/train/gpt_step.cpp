#include "train/gpt_step.h"

#include <memory>
#include <utility>

#include "checkpoint/model_shape.h"
#include "checkpoint/pretrained_load.h"
#include "core/logging.h"
#include "data/data_loader.h"
#include "model/moe_router.h"
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
      : GptPipelinedStep(
            (config.model.validate(ps.tp_size), config.split), config.microbatch_group, ps,
            [&](const StageRange& stage) {
              return std::make_unique<GptModel>(config.model, ps, store, stage);
            },
            [per_token = config.model.per_token_loss, distilled = config.teacher.has_value(),
             layers = double(config.model.num_layers)](const GptModel& model,
                                                       const GptModel::StageCtx& ctx) {
              LossTerms t = model.stage().last
                                ? last_stage_loss_terms(model, ctx, per_token, distilled)
                                : LossTerms{};
              t.indexer = model.stage_indexer_loss(ctx) / layers;
              // Every stage's MoE layers add their router losses (model/moe_router.h).
              const MoeLosses moe = model.stage_moe_losses(ctx);
              t.load_balancing = moe.load_balancing;
              t.seq_load_balancing = moe.seq_load_balancing;
              t.global_load_balancing = moe.global_load_balancing;
              t.z_loss = moe.z_loss;
              if (model.stage().last) t.mtp = model.stage_mtp_losses(ctx);
              return t;
            },
            std::move(train), std::move(valid), std::move(test)),
        cfg_(std::move(config)),
        store_(store),
        dp_cp_(ps.dp_cp) {
    MT_CHECK(cfg_.split.num_layers == cfg_.model.num_layers, "the pipeline split is of ",
             cfg_.split.num_layers, " layers, the model has ", cfg_.model.num_layers);
    if (cfg_.teacher) load_teacher(ps, store.device());
  }

  nlohmann::json shape_json() const override { return gpt_model_shape_json(cfg_.model); }
  bool has_sop_loss() const override { return false; }
  bool has_distillation_loss() const override { return cfg_.teacher.has_value(); }
  bool has_indexer_loss() const override {
    return cfg_.model.arch.dsa.enabled && cfg_.model.arch.dsa.loss_coeff > 0;
  }
  MoeLossLog moe_loss_log() const override {
    const MoeOptions& m = cfg_.model.arch.moe;
    MoeLossLog log;
    if (!m.enabled()) return log;
    log.layers = m.count_moe_layers(cfg_.model.num_layers);
    // The MTP depths' layers are MoE when the decoder's last one is (model/
    // multi_token_prediction.h); Megatron averages over them too.
    if (cfg_.model.is_moe_layer(cfg_.model.num_layers - 1))
      log.layers += cfg_.model.arch.mtp.num_layers;
    if (m.aux_loss_coeff > 0)
      log.losses.emplace_back("load_balancing_loss", &LossTerms::load_balancing);
    if (m.seq_aux_loss_coeff > 0)
      log.losses.emplace_back("seq_load_balancing_loss", &LossTerms::seq_load_balancing);
    if (m.global_aux_loss_coeff > 0)
      log.losses.emplace_back("global_load_balancing_loss", &LossTerms::global_load_balancing);
    if (m.z_loss_coeff > 0) log.losses.emplace_back("z_loss", &LossTerms::z_loss);
    return log;
  }
  int mtp_depths() const override { return cfg_.model.arch.mtp.num_layers; }
  // The MoE routers' expert biases (--moe-router-enable-expert-bias).
  void reset_step_statistics() override { reset_moe_token_counts(store_); }
  void apply_step_statistics() override {
    if (cfg_.model.arch.moe.expert_bias)
      update_moe_expert_biases(store_, *dp_cp_, float(cfg_.model.arch.moe.bias_update_rate));
  }
  int64_t seq_length() const override { return cfg_.model.seq_length; }
  GptModel* whole_gpt_model() override {
    return models().size() == 1 && split().pipeline_size == 1 ? models().front().get() : nullptr;
  }
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

  // The teacher's store and model (frozen: its gradients are never touched), and the
  // distillation the student's last stage runs.
  void load_teacher(const ParallelState& ps, Device device) {
    const GptTeacherConfig& t = *cfg_.teacher;
    teacher_store_ = std::make_unique<ParameterStore>(ps.tp_rank, ps.tp_size, device);
    teacher_ = std::make_unique<GptModel>(t.model, ps, *teacher_store_);
    teacher_store_->allocate();
    log_info("loading the distillation teacher from ", t.load, " ...");
    log_pretrained_load(load_pretrained(t.load, -1, *teacher_store_, {}));
    teacher_->refresh_compute_weights();
    GptModel& student = *models().back();
    distillation_ = std::make_unique<Distillation>(t.losses, *teacher_, student, ps);
    student.set_distillation(distillation_.get());
  }

  // The LM's loss terms of a micro-batch on the last stage.
  static LossTerms last_stage_loss_terms(const GptModel& model, const GptModel::StageCtx& ctx,
                                         bool per_token, bool distilled) {
    if (!distilled && !per_token) return LossTerms{model.stage_loss(ctx)};
    const LossSum sum = model.stage_loss_sum(ctx);
    if (!distilled) return LossTerms{.lm = sum.sum, .tokens = sum.count};
    return distillation_loss_terms(model.stage_distillation(ctx), sum.count, per_token);
  }

  // The logged terms of a distilled micro-batch (Megatron's report): means over its `count`
  // tokens, or with the per-token loss the sums and the count.
  static LossTerms distillation_loss_terms(const DistillationLossTerms& d, double count,
                                           bool per_token) {
    const double n = per_token ? 1.0 : count > 0 ? count : 1.0;
    LossTerms t{.lm = d.lm / n, .tokens = per_token ? count : 0.0};
    t.total = d.total / n;
    t.logits_distillation = d.logits / n;
    t.intermediate_distillation = d.intermediate / n;
    return t;
  }

  GptStepConfig cfg_;
  ParameterStore& store_;
  std::shared_ptr<Communicator> dp_cp_;
  std::unique_ptr<ParameterStore> teacher_store_;
  std::unique_ptr<GptModel> teacher_;
  std::unique_ptr<Distillation> distillation_;
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
