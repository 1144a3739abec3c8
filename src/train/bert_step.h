// BertStep: the ModelStep of BERT pretraining (pretrain_bert.py's forward step) — BertModel
// over BertDataLoader micro-batches, two loss terms: `lm loss` (masked LM) and, with a binary
// head, `sop loss` (sentence order).
#pragma once

#include <memory>

#include "data/bert_dataset.h"
#include "model/bert_config.h"
#include "train/model_step.h"

namespace megatron {

// `valid` and `test` may be null (no such evaluation). `config.padded_vocab_size` already set.
ModelStepFactory bert_step_factory(BertConfig config, std::shared_ptr<const BertSampleSource> train,
                                   std::shared_ptr<const BertSampleSource> valid,
                                   std::shared_ptr<const BertSampleSource> test = nullptr);

}  // namespace megatron
