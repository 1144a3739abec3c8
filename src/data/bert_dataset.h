// BertDataset: BERT pretraining samples (Megatron's BertDataset + build_training_sample):
// two segments of consecutive sentences of one document, [CLS] A [SEP] B [SEP], with the
// sentence-order (SOP) label and whole-word n-gram masking, padded to max_seq_length.
//
// Needs a sentence-level indexed dataset (preprocess --split-sentences): a document is a
// run of sentences. Sample i is built from the samples mapping (bert_samples_mapping.h) and
// RandomStream(seed, key(i)) only, so any sample can be built on any thread in any order.
#pragma once

#include <memory>
#include <vector>

#include "data/bert_masking.h"
#include "data/bert_samples_mapping.h"
#include "data/indexed_dataset.h"

namespace megatron {

struct BertSample {
  std::vector<int32_t> tokens;       // [s]: [CLS] A [SEP] B [SEP] then pad ids
  std::vector<int32_t> token_types;  // [s]: 0 for [CLS] A [SEP], 1 for B [SEP], 0 on padding
  std::vector<int32_t> labels;       // [s]: the original token where masked, −1 elsewhere
  std::vector<float> loss_mask;      // [s]: 1 where masked
  std::vector<float> padding_mask;   // [s]: 1 on real tokens, 0 on padding
  int32_t sop_label = 0;             // 1 when A and B were swapped (B came first)
  bool truncated = false;            // A + B exceeded the target and was cut
};

// Anything that serves BERT samples of a fixed length (the BERT loader reads this).
class BertSampleSource {
 public:
  virtual ~BertSampleSource() = default;
  virtual int64_t size() const = 0;
  virtual int64_t seq_length() const = 0;
  virtual void sample(int64_t index, BertSample& out) const = 0;  // thread-safe
};

struct BertDatasetOptions {
  int64_t max_seq_length = 512;  // --seq-length
  double short_seq_prob = 0.1;   // --short-seq-prob
  double mask_prob = 0.15;       // --mask-prob
  int max_ngrams = 3;
  uint64_t seed = 1234;
  int32_t cls = -1, sep = -1, mask = -1, pad = -1;  // from the tokenizer
  int64_t vocab_size = 0;                           // random replacements draw from [0, vocab_size)
  std::vector<uint8_t> word_start;  // see BertMaskingOptions; empty: every piece a word
};

class BertDataset : public BertSampleSource {
 public:
  // Samples from documents [first_document, end_document) of `data`; at least num_samples.
  BertDataset(std::shared_ptr<const IndexedDataset> data, int64_t first_document,
              int64_t end_document, int64_t num_samples, BertDatasetOptions options);

  int64_t size() const override { return int64_t(mapping_.size()); }
  int64_t seq_length() const override { return options_.max_seq_length; }
  void sample(int64_t index, BertSample& out) const override;

  const std::vector<BertSampleSpan>& mapping() const { return mapping_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  BertDatasetOptions options_;
  std::vector<BertSampleSpan> mapping_;
};

}  // namespace megatron
