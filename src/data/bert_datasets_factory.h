// build_bert_datasets: train/valid/test BertDatasets from --data-path (one sentence-level
// prefix), --split and the BERT options; Megatron's build_train_valid_test_datasets for BERT.
// The split is over documents (not sentences), as in Megatron.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "data/bert_dataset.h"

namespace megatron {

struct BertDatasets {
  // nullptr where no samples were requested or the split gives that part no documents.
  std::shared_ptr<const BertSampleSource> train, valid, test;
};

// Blending several BERT prefixes is not supported: data_path must name one prefix.
BertDatasets build_bert_datasets(const std::vector<std::string>& data_path,
                                 const std::string& split, const BertDatasetOptions& options,
                                 std::array<int64_t, 3> num_samples);

}  // namespace megatron
