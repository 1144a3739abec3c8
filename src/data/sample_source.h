// GptSampleSource: an indexable sequence of training samples of seq_length + 1 token ids
// (inputs are tokens [0, s), labels are tokens [1, s]). Implemented by GptDataset,
// BlendedDataset and MockGptDataset (--mock-data). Thread-safe for concurrent reads.
#pragma once

#include <cstdint>
#include <vector>

namespace megatron {

class GptSampleSource {
 public:
  virtual ~GptSampleSource() = default;
  virtual int64_t size() const = 0;        // number of samples
  virtual int64_t seq_length() const = 0;  // s; every sample has s + 1 tokens
  // Writes sample `index` (0 <= index < size()) into `tokens`, resized to s + 1.
  virtual void sample(int64_t index, std::vector<int32_t>& tokens) const = 0;
};

}  // namespace megatron
