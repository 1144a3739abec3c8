// What GptStep and BertStep (the ModelSteps of GPT and BERT pretraining) share, written once
// as templates over the model family's types: the loader options for a LoaderPlacement,
// Megatron's FLOP count from a model config, and the factory the Trainer calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "core/error.h"
#include "model/stage_range.h"
#include "train/log/training_log.h"
#include "train/model_step.h"

namespace megatron {

// A data loader's options (GptDataLoaderOptions, BertDataLoaderOptions) placed at `p`; the
// model-specific options keep their defaults for the caller to set.
template <typename LoaderOptions>
LoaderOptions placed_loader_options(const LoaderPlacement& p) {
  LoaderOptions o;
  o.micro_batch = p.micro_batch;
  o.global_batch = p.global_batch;
  o.dp_rank = p.dp_rank;
  o.dp_size = p.dp_size;
  o.consumed_samples = p.consumed_samples;
  return o;
}

// The share of a model config's layers that full recompute re-runs: all of them, none, or
// with block recompute the first recompute_num_layers of each model chunk (each virtual stage
// of `split`).
template <typename ModelConfig>
double recomputed_layer_fraction(const ModelConfig& c, const PipelineSplit& split) {
  if (!c.recompute_activations) return 0;
  if (c.recompute_method == RecomputeMethod::kUniform) return 1;
  int recomputed = 0;
  for (int layers : virtual_stage_layers(split))
    recomputed += std::min(c.recompute_num_layers, layers);
  return double(recomputed) / double(c.num_layers);
}

// Megatron's transformer FLOP formula (gpt_flops_per_iteration) for a model config
// (GptConfig, BertConfig) over `global_batch` samples, its layers split as `split` says.
template <typename ModelConfig>
double config_flops_per_iteration(const ModelConfig& c, int64_t global_batch,
                                  const PipelineSplit& split) {
  return gpt_flops_per_iteration(global_batch, c.seq_length, c.num_layers, c.hidden_size,
                                 c.padded_vocab_size, recomputed_layer_fraction(c, split));
}

// The factory of Step (constructed as Step(config, train, valid, test, ps, store)); `train`
// must not be null, `valid` and `test` may be (no such evaluation).
template <typename Step, typename StepConfig, typename Source>
ModelStepFactory model_step_factory(StepConfig config, std::shared_ptr<const Source> train,
                                    std::shared_ptr<const Source> valid,
                                    std::shared_ptr<const Source> test) {
  return [config = std::move(config), train = std::move(train), valid = std::move(valid),
          test = std::move(test)](const ParallelState& ps,
                                  ParameterStore& store) -> std::unique_ptr<ModelStep> {
    MT_REQUIRE(train != nullptr, "no training data");
    return std::make_unique<Step>(config, train, valid, test, ps, store);
  };
}

}  // namespace megatron
