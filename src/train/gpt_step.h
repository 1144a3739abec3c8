// GptStep: the ModelStep of GPT pretraining (pretrain_gpt.py's forward step) — GptModel over
// GptDataLoader micro-batches, one loss term (`lm loss`). The model is this rank's pipeline
// stage (its model chunks, when interleaved), and the micro-batches of an iteration run in the
// pipeline schedule (pipeline/schedule.h): no pipelining at PP = 1, 1F1B, or interleaved 1F1B.
// Every pipeline rank reads the same micro-batches (the first stage needs the tokens, the last
// the labels, every stage the dropout keys).
// With a distillation teacher (model/distillation.h, docs/distillation.md) the step loads the
// teacher's weights (no gradients, no optimizer state) and the losses are the distillation's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "data/sample_source.h"
#include "model/distillation.h"
#include "model/gpt_model.h"
#include "model/stage_range.h"
#include "train/model_step.h"

namespace megatron {

// Knowledge distillation's teacher: its model (the student's vocabulary and TP layout) and
// the megatron-cpp checkpoint directory its weights are read from (resharded to the run's TP).
struct GptTeacherConfig {
  GptConfig model;
  std::string load;
  DistillationConfig losses;
};

struct GptStepConfig {
  GptConfig model;  // padded_vocab_size already set
  int32_t eod_token = -1;
  bool eod_mask_loss = false;
  // How the layers split over the pipeline stages (num_layers and pipeline_size: the model's
  // and the run's; chunks > 1: the interleaved schedule).
  PipelineSplit split;
  int64_t microbatch_group = 0;  // interleaved: micro-batches per group and chunk (0: PP size)
  std::optional<GptTeacherConfig> teacher;  // --export-kd-teacher-load
};

// `valid` and `test` may be null (no such evaluation).
ModelStepFactory gpt_step_factory(GptStepConfig config,
                                  std::shared_ptr<const GptSampleSource> train,
                                  std::shared_ptr<const GptSampleSource> valid,
                                  std::shared_ptr<const GptSampleSource> test = nullptr);

}  // namespace megatron
