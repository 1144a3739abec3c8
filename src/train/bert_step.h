// BertStep: the ModelStep of BERT pretraining (pretrain_bert.py's forward step) — BertModel
// over BertDataLoader micro-batches, two loss terms: `lm loss` (masked LM) and, with a binary
// head, `sop loss` (sentence order). The model is this rank's pipeline stage (its model chunks,
// when interleaved) and the micro-batches of an iteration run in the pipeline schedule, as
// GptStep's (train/pipelined_step.h).
#pragma once

#include <memory>

#include "data/bert_dataset.h"
#include "model/bert_config.h"
#include "model/stage_range.h"
#include "train/model_step.h"

namespace megatron {

struct BertStepConfig {
  BertConfig model;  // padded_vocab_size already set
  // How the layers split over the pipeline stages (num_layers and pipeline_size: the model's
  // and the run's; chunks > 1: the interleaved schedule).
  PipelineSplit split;
  int64_t microbatch_group = 0;  // interleaved: micro-batches per group and chunk (0: PP size)
};

// `valid` and `test` may be null (no such evaluation).
ModelStepFactory bert_step_factory(BertStepConfig config,
                                   std::shared_ptr<const BertSampleSource> train,
                                   std::shared_ptr<const BertSampleSource> valid,
                                   std::shared_ptr<const BertSampleSource> test = nullptr);

}  // namespace megatron
