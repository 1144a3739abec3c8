// The three index arrays that turn documents into GPT training samples (Megatron's
// _build_index_mappings in gpt_dataset.py), computed here without numpy.
//
//   doc_idx     i64 [E·n_docs]: document (sequence) ids, every document once per epoch,
//               shuffled; with a separate last epoch, epochs 0..E-2 are shuffled together
//               and the last epoch on its own.
//   sample_idx  i64 [n_samples + 1, 2]: sample k starts at token sample_idx[k][1] of
//               document doc_idx[sample_idx[k][0]] and ends at (and includes) token
//               sample_idx[k+1][1] of doc_idx[sample_idx[k+1][0]]; a sample holds
//               seq_length + 1 tokens, so consecutive samples share one boundary token.
//   shuffle_idx i64 [n_samples]: the order samples are served in; with a separate last
//               epoch the samples of the last epoch are shuffled among themselves only.
//
// E (epochs) is the least number of passes that yields num_samples samples. The last epoch
// is kept separate when it would contribute fewer than 80% of an epoch's samples, so those
// few samples are not mixed into (and do not over-represent documents of) the earlier ones.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace megatron {

struct GptIndex {
  std::vector<int64_t> doc_idx;      // [E·n_docs]
  std::vector<int64_t> sample_idx;   // [(n_samples + 1)·2] (document position, offset) pairs
  std::vector<int64_t> shuffle_idx;  // [n_samples]
  int64_t num_epochs = 0;
  bool separate_last_epoch = false;
  int64_t num_samples() const { return int64_t(shuffle_idx.size()); }
};

// Megatron's _num_epochs: least E with (E·tokens_per_epoch − 1) / seq_length >= num_samples.
int64_t gpt_num_epochs(int64_t tokens_per_epoch, int64_t seq_length, int64_t num_samples);

// `documents`: the ids of the documents of this split; `sizes`: the length of every document
// of the whole dataset (indexed by id). Shuffles draw from RandomStream(seed, ·).
GptIndex build_gpt_index(std::span<const int64_t> documents, std::span<const int32_t> sizes,
                         int64_t seq_length, int64_t num_samples, uint64_t seed);

}  // namespace megatron
