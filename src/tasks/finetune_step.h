// FinetuneStep: the ModelStep of BERT finetuning (Megatron's tasks/finetune_utils.py with
// tasks/eval_utils.py) — a BertClassifier over a FinetuneDataset, on the same Trainer as
// pretraining (TP, PP, DP gradient reduction, sequence parallelism, the distributed optimizer,
// AdamW, LR schedule, logging, checkpoints).
//
// Pipeline parallelism: this rank's BertClassifier is its pipeline stage, run by the schedule
// driver of pretraining (train/pipeline_chunks.h). An iteration is one micro-batch per DP
// rank (Megatron's finetuning), so 1F1B degenerates to one forward through the stages and one
// backward; the interleaved schedule, which needs a multiple of PP micro-batches, does not
// apply. Every stage reads the same micro-batches; the last computes the loss and the logits.
//
// Data order, per epoch (Megatron's DistributedSampler with drop_last): the N training samples
// in a shuffled order, padded to ceil(N/DP)·DP by repeating its first samples, cut into
// iterations of one micro-batch per DP rank (iterations per epoch =
// floor(ceil(N/DP) / micro-batch)). Two deliberate differences: the shuffle is Philox keyed
// by (--seed, epoch), not torch.randperm; and a rank's micro-batch is a contiguous block of
// the iteration's samples (not every DP-th sample), so the dropout masks, keyed by a sample's
// place in the run, and hence the results, are the same at every DP size.
//
// Evaluation at the end of each epoch (end_of_epoch): the accuracy of the argmax over each
// --valid-data set (counted on the last pipeline stage, known on every rank), printed as
// Megatron's eval_utils prints it, every sample counted once at any DP size (Megatron with DP > 1
// drops the last partial micro-batch of each rank and counts the sampler's repeated samples). The
// loss is logged as Megatron's finetuning logs it: `lm loss`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/bert_classifier.h"
#include "tasks/finetune_dataset.h"
#include "train/model_step.h"

namespace megatron {

struct FinetuneStepConfig {
  BertClassifierConfig model;
  // --pretrained-checkpoint: the body is read from it at initialisation, the head stays fresh
  // (checkpoint/pretrained_load.h); "" = none. A later --load (resume) replaces both.
  std::string pretrained_checkpoint;
  int64_t eval_micro_batch = 1;  // samples per evaluation forward pass
};

// Megatron's len(train_dataloader): floor(ceil(samples / dp_size) / micro_batch).
int64_t finetune_iterations_per_epoch(int64_t samples, int64_t micro_batch, int64_t dp_size);

// `train` must not be null; each of `valid` is one accuracy line per epoch.
ModelStepFactory finetune_step_factory(FinetuneStepConfig config,
                                       std::shared_ptr<const FinetuneDataset> train,
                                       std::vector<std::shared_ptr<const FinetuneDataset>> valid);

}  // namespace megatron
