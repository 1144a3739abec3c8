// PipelinedStep: the part of a pretraining ModelStep (GptStep, BertStep) that does not depend
// on the model family — this rank's model chunks run in the pipeline schedule
// (train/pipeline_chunks.h), fed by the family's data loader over its train / valid / test
// sample sources. A derived step says only what differs: how a loader micro-batch becomes the
// model's batch, the loader's model-specific options, and the model's shape, losses and FLOPs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "train/model_step.h"
#include "train/model_step_common.h"
#include "train/pipeline_chunks.h"

namespace megatron {

// Loader is constructed as Loader(std::shared_ptr<const Source>, LoaderOptions) and yields
// micro-batches from next().
template <typename Model, typename Batch, typename Loader, typename LoaderOptions, typename Source>
class PipelinedStep : public ModelStep {
 public:
  using Chunks = PipelineChunks<Model, Batch>;
  using MicroBatch = decltype(std::declval<Loader&>().next());

  void init_weights(uint64_t seed) override {
    for (auto& chunk : chunks_.models()) chunk->init_weights(seed);
  }
  void refresh_compute_weights() override {
    for (auto& chunk : chunks_.models()) chunk->refresh_compute_weights();
  }

  bool has_validation_data() const override { return valid_source_ != nullptr; }
  void start_training_data(const LoaderPlacement& p) override { start(train_, train_source_, p); }
  void start_validation_data(const LoaderPlacement& p) override { start(valid_, valid_source_, p); }
  bool has_test_data() const override { return test_source_ != nullptr; }
  void start_test_data(const LoaderPlacement& p) override { start(valid_, test_source_, p); }

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

 protected:
  // How the layers split over the pipeline's virtual stages: what block recompute counts its
  // layers in.
  const PipelineSplit& split() const { return chunks_.split(); }
  // This rank's model chunks (the last one holds the last stage when this rank has it).
  std::vector<std::unique_ptr<Model>>& models() { return chunks_.models(); }

  // The model chunks as PipelineChunks builds them; `valid` and `test` may be null.
  PipelinedStep(const PipelineSplit& split, int64_t microbatch_group, const ParallelState& ps,
                const typename Chunks::MakeModel& make, typename Chunks::LossOf loss_of,
                std::shared_ptr<const Source> train, std::shared_ptr<const Source> valid,
                std::shared_ptr<const Source> test)
      : train_source_(std::move(train)),
        valid_source_(std::move(valid)),
        test_source_(std::move(test)),
        chunks_(split, microbatch_group, ps, make, std::move(loss_of)) {}

  // The model's batch of loader micro-batch `mb` read at `iteration` (keys the dropout masks).
  virtual Batch to_batch(const MicroBatch& mb, int64_t iteration) const = 0;
  // The loader's options at `p`: placed_loader_options plus any model-specific ones.
  virtual LoaderOptions loader_options(const LoaderPlacement& p) const {
    return placed_loader_options<LoaderOptions>(p);
  }

 private:
  void start(std::optional<Loader>& loader, const std::shared_ptr<const Source>& source,
             const LoaderPlacement& p) {
    loader.emplace(source, loader_options(p));
    micro_batch_ = p.micro_batch;
  }

  std::function<Batch()> next_batch(Loader& loader, int64_t iteration) const {
    return [this, &loader, iteration] { return to_batch(loader.next(), iteration); };
  }

  std::shared_ptr<const Source> train_source_, valid_source_, test_source_;
  Chunks chunks_;                        // this rank's model chunks
  std::optional<Loader> train_, valid_;  // valid_: the evaluation loader (valid or test)
  int64_t micro_batch_ = 1;
};

}  // namespace megatron
