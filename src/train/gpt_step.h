// GptStep: the ModelStep of GPT pretraining (pretrain_gpt.py's forward step) — GptModel over
// GptDataLoader micro-batches, one loss term (`lm loss`).
#pragma once

#include <cstdint>
#include <memory>

#include "data/sample_source.h"
#include "model/gpt_model.h"
#include "train/model_step.h"

namespace megatron {

struct GptStepConfig {
  GptConfig model;  // padded_vocab_size already set
  int32_t eod_token = -1;
  bool eod_mask_loss = false;
};

// `valid` and `test` may be null (no such evaluation).
ModelStepFactory gpt_step_factory(GptStepConfig config,
                                  std::shared_ptr<const GptSampleSource> train,
                                  std::shared_ptr<const GptSampleSource> valid,
                                  std::shared_ptr<const GptSampleSource> test = nullptr);

}  // namespace megatron
