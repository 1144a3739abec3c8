// MockGptDataset (--mock-data): deterministic token ids, no files. With d_j = u32 draw j of
// the Philox stream (seed, philox_key({i})), sample i is
//   t_0 = d_0 mod V,   t_j = (t_{j-1} + 1 + d_j mod 3) mod V
// — a random walk whose next token is one of three, so a model can learn it (the best loss
// is ln 3) and a falling loss shows that training works. Any sample is a pure function of
// its index: the same on every rank, layout and resume.
#pragma once

#include <cstdint>

#include "data/sample_source.h"

namespace megatron {

class MockGptDataset : public GptSampleSource {
 public:
  MockGptDataset(int64_t num_samples, int64_t seq_length, int64_t vocab_size, uint64_t seed);
  int64_t size() const override { return num_samples_; }
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t index, std::vector<int32_t>& tokens) const override;

 private:
  int64_t num_samples_, seq_length_, vocab_size_;
  uint64_t seed_;
};

}  // namespace megatron
