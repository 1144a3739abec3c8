// build_gpt_datasets: the trainer's one call to get its train/valid/test sample sources from
// Megatron's --data-path, --split, --seq-length and --seed (Megatron's
// build_train_valid_test_datasets for GPT).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/sample_source.h"

namespace megatron {

struct GptDatasets {
  // nullptr where no samples were requested or the split gives that part no documents.
  std::shared_ptr<const GptSampleSource> train, valid, test;
};

// data_path: the --data-path values, either one prefix ("data/corpus_text_document") or
//   weight/prefix pairs ("0.3", "a_text_document", "0.7", "b_text_document").
// split: the --split string, e.g. "949,50,1"; each prefix's documents are split this way.
// num_samples: samples wanted for {train, valid, test}, as Megatron computes them
//   (train_iters·global_batch, (train_iters/eval_interval + 1)·eval_iters·global_batch,
//   eval_iters·global_batch). Each returned source has at least that many samples.
// With several prefixes, each one is asked for ceil(weight·n·1.005) samples (Megatron's
// margin) and a BlendedDataset of exactly n samples mixes them.
// cache_dir: --data-cache-path, where the sample indices are cached ("": next to the data).
// Throws Error naming the flag on malformed arguments or a missing/corrupt dataset.
GptDatasets build_gpt_datasets(const std::vector<std::string>& data_path, const std::string& split,
                               int64_t seq_length, uint64_t seed,
                               std::array<int64_t, 3> num_samples,
                               const std::string& cache_dir = "");

// Megatron's train_valid_test_num_samples: {train_iters·G, (train_iters / eval_interval + 1)
// · eval_iters · G, eval_iters · G} with G = --global-batch-size.
std::array<int64_t, 3> train_valid_test_num_samples(int64_t train_iters, int64_t global_batch,
                                                    int64_t eval_interval, int64_t eval_iters);

// Parses --data-path into (weight, prefix) pairs; a single prefix gets weight 1.
std::vector<std::pair<double, std::string>> parse_data_path(
    const std::vector<std::string>& data_path);

}  // namespace megatron
