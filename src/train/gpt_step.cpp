#include "train/gpt_step.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "data/data_loader.h"
#include "model/stage_range.h"
#include "pipeline/pipeline_executor.h"
#include "train/checkpoint_convert.h"
#include "train/model_step_common.h"

namespace megatron {

namespace {

const GptConfig& validated(const GptConfig& config, const ParallelState& ps, int chunks) {
  config.validate(ps.tp_size);
  check_pipeline_split(config.num_layers, ps.pp_size, chunks);
  return config;
}

class GptStep final : public ModelStep {
 public:
  GptStep(GptStepConfig config, std::shared_ptr<const GptSampleSource> train,
          std::shared_ptr<const GptSampleSource> valid, std::shared_ptr<const GptSampleSource> test,
          const ParallelState& ps, ParameterStore& store)
      : cfg_(std::move(config)),
        ps_(ps),
        train_source_(std::move(train)),
        valid_source_(std::move(valid)),
        test_source_(std::move(test)) {
    validated(cfg_.model, ps, cfg_.pipeline_chunks);
    for (int c = 0; c < cfg_.pipeline_chunks; ++c) {
      chunks_.push_back(std::make_unique<GptModel>(
          cfg_.model, ps, store,
          stage_range(cfg_.model.num_layers, ps.pp_size, ps.pp_rank, cfg_.pipeline_chunks, c)));
    }
    free_ctxs_.resize(chunks_.size());
  }

  void init_weights(uint64_t seed) override {
    for (auto& chunk : chunks_) chunk->init_weights(seed);
  }
  void refresh_compute_weights() override {
    for (auto& chunk : chunks_) chunk->refresh_compute_weights();
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
    return run(*train_,
               training_schedule(ps_.pp_size, ps_.pp_rank, cfg_.pipeline_chunks, micro_batches),
               iteration, /*train=*/true, grad_scale, seed);
  }
  LossTerms valid_micro_batches(int64_t micro_batches, int64_t iteration) override {
    return run(*valid_, forward_only_schedule(cfg_.pipeline_chunks, micro_batches), iteration,
               /*train=*/false, 0.0f, 0);
  }

 private:
  using CtxPtr = GptModel::StageCtxPtr;

  // Runs `ops` over the next micro-batches of `loader`; returns the sum of the losses on the
  // last stage (zero elsewhere).
  LossTerms run(GptDataLoader& loader, const std::vector<PipelineOp>& ops, int64_t iteration,
                bool train, float grad_scale, uint64_t seed) {
    std::vector<GptBatch> batches;  // micro-batch m, read when its first forward needs it
    std::map<std::pair<int, int64_t>, CtxPtr> live;
    double loss_sum = 0;
    PipelineStageFunctions fns;
    fns.forward = [&](int c, int64_t m, const Tensor& input) {
      while (int64_t(batches.size()) <= m) batches.push_back(to_batch(loader.next(), iteration));
      GptModel& chunk = *chunks_[size_t(c)];
      CtxPtr ctx = acquire(c);
      Tensor output = chunk.forward_stage(*ctx, batches[size_t(m)], input, train, seed);
      if (chunk.stage().last) loss_sum += chunk.stage_loss(*ctx);
      if (train)
        live.emplace(std::make_pair(c, m), std::move(ctx));
      else
        free_ctxs_[size_t(c)].push_back(std::move(ctx));
      return output;
    };
    fns.backward = [&](int c, int64_t m, const Tensor& grad_output) {
      auto it = live.find({c, m});
      MT_CHECK(it != live.end(), "pipeline backward of micro-batch ", m, " on chunk ", c,
               " before its forward");
      Tensor grad_input = chunks_[size_t(c)]->backward_stage(*it->second, grad_output, grad_scale);
      // The executor copies what it sends, so the context (and its arena) is free now.
      free_ctxs_[size_t(c)].push_back(std::move(it->second));
      live.erase(it);
      return grad_input;
    };
    const GptModel& any = *chunks_.front();
    run_pipeline_schedule(
        ops, ps_.pp_size > 1 ? ps_.pp.get() : nullptr, cfg_.pipeline_chunks,
        {any.stage_activation_shape(micro_batch_), any.compute_dtype(), any.device()}, fns);
    return {loss_sum};
  }

  // A stage context of chunk c, reused across micro-batches and iterations (its arena keeps
  // its high-water size, so steady-state steps allocate nothing).
  CtxPtr acquire(int c) {
    auto& pool = free_ctxs_[size_t(c)];
    if (pool.empty()) return chunks_[size_t(c)]->make_stage_ctx();
    CtxPtr ctx = std::move(pool.back());
    pool.pop_back();
    return ctx;
  }

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
  ParallelState ps_;
  std::shared_ptr<const GptSampleSource> train_source_, valid_source_, test_source_;
  std::vector<std::unique_ptr<GptModel>> chunks_;  // this rank's model chunks
  std::vector<std::vector<CtxPtr>> free_ctxs_;     // per chunk
  std::optional<GptDataLoader> train_, valid_;     // valid_: the evaluation loader (valid or test)
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
