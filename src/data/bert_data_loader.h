// BertDataLoader: a data-parallel rank's BERT micro-batches, with the same sample order,
// prefetching and exact resume as GptDataLoader (micro_batch_schedule.h).
#pragma once

#include <memory>

#include "core/tensor.h"
#include "data/bert_dataset.h"

namespace megatron {

struct BertMicroBatch {
  Tensor tokens;         // i32 [b, s]
  Tensor token_types;    // i32 [b, s]
  Tensor labels;         // i32 [b, s]: −1 where not masked
  Tensor loss_mask;      // f32 [b, s]: 1 where masked
  Tensor padding_mask;   // f32 [b, s]: 1 on real tokens
  Tensor sop_labels;     // i32 [b]: 1 when the segments were swapped
  int64_t first_sample;  // global index of row 0; row j is sample first_sample + j
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
