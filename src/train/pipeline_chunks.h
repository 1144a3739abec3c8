// PipelineChunks: what GptStep and BertStep share to run a model family as pipeline stages —
// this rank's model chunks (one per virtual stage it holds under the PipelineSplit, StageRange)
// and one iteration's micro-batches through the pipeline schedule (pipeline/schedule.h: no
// pipelining at PP = 1, 1F1B, or interleaved 1F1B with more than one chunk), driven by the executor
// (pipeline/pipeline_executor.h). A template over the model (GptModel, BertModel), which
// provides the stage interface: StageCtxPtr make_stage_ctx(), forward_stage, backward_stage,
// release_stage, stage(), stage_activation_shape, compute_dtype, device.
//
// Every pipeline rank reads the same micro-batches (the first stage needs the tokens, the last
// the labels, every stage the dropout keys); micro-batch m is read when its first forward
// needs it. The losses are the last stage's, SUMMED over the micro-batches (zero on the other
// ranks): the Trainer broadcasts them from the last stage and divides.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/moe_router.h"  // MoeLosses
#include "model/stage_range.h"
#include "pipeline/pipeline_executor.h"
#include "pipeline/schedule.h"
#include "train/model_step.h"

namespace megatron {

template <typename Model, typename Batch>
class PipelineChunks {
 public:
  using CtxPtr = typename Model::StageCtxPtr;
  using StageCtx = typename Model::StageCtx;
  // make(stage): the model of one chunk. loss_of(model, ctx): the losses of a micro-batch the
  // last stage's forward_stage ran in ctx.
  using MakeModel = std::function<std::unique_ptr<Model>(const StageRange&)>;
  using LossOf = std::function<LossTerms(const Model&, const StageCtx&)>;
  using NextBatch = std::function<Batch()>;

  // `split`: how the model's layers split over ps.pp_size stages (its pipeline_size);
  // `microbatch_group`: the interleaved schedule's micro-batches per group (0: ps.pp_size).
  // Throws Error naming the flags for a split Megatron-LM refuses (check_pipeline_split).
  PipelineChunks(const PipelineSplit& split, int64_t microbatch_group, const ParallelState& ps,
                 const MakeModel& make, LossOf loss_of)
      : ps_(ps),
        split_(split),
        chunks_(split.chunks),
        microbatch_group_(microbatch_group),
        loss_of_(std::move(loss_of)) {
    MT_CHECK(split.pipeline_size == ps.pp_size, "the pipeline split is for ", split.pipeline_size,
             " stages, the run has ", ps.pp_size);
    check_pipeline_split(split);
    for (int c = 0; c < chunks_; ++c) models_.push_back(make(stage_range(split, ps.pp_rank, c)));
    free_ctxs_.resize(models_.size());
  }

  std::vector<std::unique_ptr<Model>>& models() { return models_; }
  const PipelineSplit& split() const { return split_; }

  // One iteration's `micro_batches` training micro-batches of `micro_batch` samples: forward +
  // backward (gradients scaled by grad_scale accumulated into the store).
  LossTerms train(int64_t micro_batches, int64_t micro_batch, const NextBatch& next,
                  float grad_scale, uint64_t seed) {
    return run(
        training_schedule(ps_.pp_size, ps_.pp_rank, chunks_, micro_batches, microbatch_group_),
        micro_batch, next, /*train=*/true, grad_scale, seed);
  }
  // The same, forward only, without dropout.
  LossTerms evaluate(int64_t micro_batches, int64_t micro_batch, const NextBatch& next) {
    return run(forward_only_schedule(chunks_, micro_batches), micro_batch, next, /*train=*/false,
               0.0f, 0);
  }

 private:
  LossTerms run(const std::vector<PipelineOp>& ops, int64_t micro_batch, const NextBatch& next,
                bool train, float grad_scale, uint64_t seed) {
    std::vector<Batch> batches;  // micro-batch m, read when its first forward needs it
    std::map<std::pair<int, int64_t>, CtxPtr> live;
    LossTerms sum;
    PipelineStageFunctions fns;
    fns.forward = [&](int c, int64_t m, const Tensor& input) {
      while (int64_t(batches.size()) <= m) batches.push_back(next());
      Model& model = *models_[size_t(c)];
      CtxPtr ctx = acquire(c);
      Tensor output = model.forward_stage(*ctx, batches[size_t(m)], input, train, seed);
      if (model.stage().last) sum += loss_of_(model, *ctx);
      // Every stage's MoE layers add their router losses (model/moe_router.h).
      if constexpr (requires { model.stage_moe_losses(*ctx); }) {
        const MoeLosses moe = model.stage_moe_losses(*ctx);
        sum += LossTerms{.load_balancing = moe.load_balancing,
                         .seq_load_balancing = moe.seq_load_balancing,
                         .z_loss = moe.z_loss};
      }
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
      Tensor grad_input = models_[size_t(c)]->backward_stage(*it->second, grad_output, grad_scale);
      // The executor copies what it sends, so the context (and its arena) is free now.
      free_ctxs_[size_t(c)].push_back(std::move(it->second));
      live.erase(it);
      return grad_input;
    };
    const Model& any = *models_.front();
    run_pipeline_schedule(
        ops, ps_.pp_size > 1 ? ps_.pp.get() : nullptr, chunks_,
        {any.stage_activation_shape(micro_batch), any.compute_dtype(), any.device()}, fns);
    // Every context is free again; their activations are dead until the next step.
    for (size_t c = 0; c < models_.size(); ++c)
      for (CtxPtr& ctx : free_ctxs_[c]) models_[c]->release_stage(*ctx);
    return sum;
  }

  // A stage context of chunk c, reused across micro-batches and iterations (its arena keeps
  // its high-water size, so steady-state steps allocate nothing).
  CtxPtr acquire(int c) {
    auto& pool = free_ctxs_[size_t(c)];
    if (pool.empty()) return models_[size_t(c)]->make_stage_ctx();
    CtxPtr ctx = std::move(pool.back());
    pool.pop_back();
    return ctx;
  }

  ParallelState ps_;
  PipelineSplit split_;
  int chunks_;
  int64_t microbatch_group_;
  LossOf loss_of_;
  std::vector<std::unique_ptr<Model>> models_;  // this rank's model chunks
  std::vector<std::vector<CtxPtr>> free_ctxs_;  // per chunk
};

}  // namespace megatron
