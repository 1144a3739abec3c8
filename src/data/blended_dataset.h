// BlendedDataset: mixes several sample sources by weight (--data-path w1 p1 w2 p2 ...),
// Megatron's BlendableDataset with helpers.cpp build_blending_indices.
//
// Sample i comes from the dataset that is furthest behind its target share: with weights
// normalised to sum 1, pick argmax_k weight_k · max(i, 1) − count_k (ties to the lowest k),
// then serve that dataset's next unused sample. After n samples every count is within about
// one sample of weight · n, and the interleaving is deterministic (no RNG).
#pragma once

#include <memory>
#include <vector>

#include "data/sample_source.h"

namespace megatron {

struct BlendingIndex {
  std::vector<int32_t> dataset;         // [size]: which dataset serves sample i
  std::vector<int64_t> dataset_sample;  // [size]: the sample index within that dataset
};

// `weights` need not be normalised; they must be non-negative with a positive sum.
BlendingIndex build_blending_index(const std::vector<double>& weights, int64_t size);

class BlendedDataset : public GptSampleSource {
 public:
  BlendedDataset(std::vector<std::shared_ptr<const GptSampleSource>> datasets,
                 const std::vector<double>& weights, int64_t size);

  int64_t size() const override { return int64_t(index_.dataset.size()); }
  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  void sample(int64_t index, std::vector<int32_t>& tokens) const override;

  const BlendingIndex& blending_index() const { return index_; }

 private:
  std::vector<std::shared_ptr<const GptSampleSource>> datasets_;
  BlendingIndex index_;
};

}  // namespace megatron
