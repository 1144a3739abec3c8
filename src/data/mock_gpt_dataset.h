// MockGptDataset: synthetic GPT samples for --mock-data (benchmarks and smoke tests without a
// corpus). Sample i counts up from a random start: token k is (start_i + k) mod vocab_size,
// start_i drawn from Philox (seed, i). The pattern is learnable, so the loss of a working
// model falls quickly, and any sample can be produced in O(s) on any rank.
#pragma once

#include "data/sample_source.h"

namespace megatron {

class MockGptDataset : public GptSampleSource {
 public:
  MockGptDataset(int64_t size, int64_t seq_length, int64_t vocab_size, uint64_t seed);
  int64_t size() const override { return size_; }
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t index, std::vector<int32_t>& tokens) const override;

 private:
  int64_t size_, seq_length_, vocab_size_;
  uint64_t seed_;
};

}  // namespace megatron
