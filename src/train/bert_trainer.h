// BertTrainer: the BERT pretraining loop (Megatron's pretrain() with pretrain_bert.py's
// forward step): the same iteration as Trainer (gradient accumulation → DP all-reduce →
// fp16 overflow check → clip → AdamW → schedule; log / eval / save / exit intervals, resume)
// with BertModel, the BERT micro-batch loader and two losses, `lm loss` (masked LM) and
// `sop loss` (sentence order), logged separately. The optimizer sees lm + sop.
#pragma once

#include <memory>

#include "data/bert_dataset.h"
#include "dist/communicator.h"
#include "model/bert_config.h"
#include "train/trainer.h"

namespace megatron {

struct BertTrainerConfig {
  BertConfig model;        // padded_vocab_size already set
  TrainerConfig training;  // every option except .model and the GPT-only .eod_* (ignored)
};

class BertTrainer {
 public:
  // `valid` may be null (no evaluation).
  BertTrainer(BertTrainerConfig config, std::shared_ptr<Communicator> world,
              std::shared_ptr<const BertSampleSource> train,
              std::shared_ptr<const BertSampleSource> valid);
  ~BertTrainer();
  TrainingResult run();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron
