// GptDataset: GPT pretraining samples (seq_length + 1 tokens each) cut from a range of
// documents of an indexed dataset, in a shuffled order — Megatron's GPTDataset.
//
// As in Megatron, a GPT "document" is a sequence of the indexed dataset (preprocess writes
// one sequence per document unless --split-sentences). The index (gpt_index.h) is loaded
// from the cache next to the data when present, otherwise built and cached
// (gpt_index_cache.h); a read-only data directory just means no caching.
#pragma once

#include <memory>
#include <string>

#include "data/gpt_index.h"
#include "data/indexed_dataset.h"
#include "data/sample_source.h"

namespace megatron {

class GptDataset : public GptSampleSource {
 public:
  // Samples from documents [first_document, end_document) of `data`; at least
  // `num_samples` of them (size() may exceed it: whole epochs' worth are indexed).
  // `name` ("train", "valid", "test") only labels the cache file, which is written in
  // `cache_dir` (--data-cache-path) or, when empty, next to the data (data/gpt_index_cache.h).
  GptDataset(std::shared_ptr<const IndexedDataset> data, const std::string& name,
             int64_t first_document, int64_t end_document, int64_t num_samples, int64_t seq_length,
             uint64_t seed, const std::string& cache_dir = "");

  int64_t size() const override { return index_.num_samples(); }
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t index, std::vector<int32_t>& tokens) const override;

  const GptIndex& index() const { return index_; }
  const std::string& cache_path() const { return cache_path_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  int64_t seq_length_;
  GptIndex index_;
  std::string cache_path_;
};

}  // namespace megatron
