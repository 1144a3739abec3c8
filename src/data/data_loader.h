// GptDataLoader: turns a sample source into this data-parallel rank's micro-batches.
//
// Sample order is Megatron's MegatronPretrainingSampler: the global batch starting at
// consumed sample c is split into micro-steps of micro_batch·dp samples; in micro-step m,
// DP rank r takes samples c + m·micro_batch·dp + r·micro_batch + [0, micro_batch). Indices
// wrap modulo the source size. Resuming from a consumed-samples count continues exactly.
// A background thread prefetches the next micro-batches.
#pragma once

#include <memory>

#include "core/tensor.h"
#include "data/sample_source.h"

namespace megatron {

struct GptMicroBatch {
  Tensor tokens;         // i32 [b, s]
  Tensor labels;         // i32 [b, s]
  Tensor loss_mask;      // f32 [b, s]: 0 where the label is EOD and --eod-mask-loss is set
  int64_t first_sample;  // global index of row 0; row j is sample first_sample + j
};

struct GptDataLoaderOptions {
  int64_t micro_batch = 1;
  int64_t global_batch = 1;
  int dp_rank = 0;
  int dp_size = 1;
  int64_t consumed_samples = 0;  // where to start (resume)
  int32_t eod_token = -1;
  bool eod_mask_loss = false;
  int prefetch = 2;  // micro-batches prepared ahead on the loader thread
};

class GptDataLoader {
 public:
  GptDataLoader(std::shared_ptr<const GptSampleSource> source, GptDataLoaderOptions options);
  ~GptDataLoader();
  GptMicroBatch next();              // this rank's next micro-batch
  int64_t consumed_samples() const;  // global samples consumed by completed global batches

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megatron
