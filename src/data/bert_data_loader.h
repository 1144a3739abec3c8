// BertDataLoader: a data-parallel rank's BERT micro-batches, with the same sample order,
// prefetching and exact resume as GptDataLoader (micro_batch_schedule.h).
#pragma once

#include <memory>

#include "core/tensor.h"
#include "data/bert_dataset.h"

namespace megatron {

// Megatron's masked positions of a micro-batch, in the order the model scores them: the
// rows pos·b + j of the sequence-major [s·b] activations (sample j, position pos) whose loss
// mask is non-zero, ascending, with their labels and loss-mask weights. Host tensors.
struct BertMaskedPositions {
  Tensor rows;     // i32 [n]
  Tensor labels;   // i32 [n]
  Tensor weights;  // f32 [n]
};

// From [b, s] labels (i32) and loss mask (f32), contiguous host tensors.
BertMaskedPositions bert_masked_positions(const Tensor& labels, const Tensor& loss_mask);

// Host tensors, ready for BertModel (the model uploads them in one copy).
struct BertMicroBatch {
  Tensor tokens;       // i32 [b, s]
  Tensor token_types;  // i32 [b, s]
  Tensor labels;       // i32 [b, s]: −1 where not masked
  Tensor loss_mask;    // f32 [b, s]: 1 where masked
  Tensor pad_mask;     // u8 [b, s]: 1 on padding (the complement of Megatron's padding_mask,
                       // which is 1 on real tokens): the attention kernels' convention
  BertMaskedPositions masked;  // what the MLM head scores, from labels and loss_mask
  Tensor sop_labels;           // i32 [b]: 1 when the segments were swapped
  int64_t first_sample;        // global index of row 0; row j is sample first_sample + j
};

struct BertDataLoaderOptions {
  int64_t micro_batch = 1;
  int64_t global_batch = 1;
  int dp_rank = 0;
  int dp_size = 1;
  int64_t consumed_samples = 0;  // where to start (resume)
  int prefetch = 2;              // micro-batches prepared ahead on the loader thread
};

class BertDataLoader {
 public:
  BertDataLoader(std::shared_ptr<const BertSampleSource> source, BertDataLoaderOptions options);
  ~BertDataLoader();
  BertMicroBatch next();             // this rank's next micro-batch
  int64_t consumed_samples() const;  // global samples consumed by completed global batches

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron
