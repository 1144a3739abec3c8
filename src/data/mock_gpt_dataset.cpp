#include "data/mock_gpt_dataset.h"

#include "core/error.h"
#include "core/philox.h"

namespace megatron {

namespace {
constexpr uint64_t kKeyMock = 0x6d6f636b;
}

MockGptDataset::MockGptDataset(int64_t size, int64_t seq_length, int64_t vocab_size, uint64_t seed)
    : size_(size), seq_length_(seq_length), vocab_size_(vocab_size), seed_(seed) {
  MT_CHECK(size >= 1 && seq_length >= 1 && vocab_size >= 1,
           "mock data needs size, --seq-length and the vocabulary size >= 1, got ", size, ", ",
           seq_length, ", ", vocab_size);
}

void MockGptDataset::sample(int64_t index, std::vector<int32_t>& tokens) const {
  MT_CHECK(index >= 0 && index < size_, "sample ", index, " out of range [0, ", size_, ")");
  const uint64_t start = PhiloxStream(seed_, kKeyMock).u32(uint64_t(index)) % uint64_t(vocab_size_);
  tokens.resize(size_t(seq_length_ + 1));
  for (int64_t k = 0; k <= seq_length_; ++k)
    tokens[size_t(k)] = int32_t((start + uint64_t(k)) % uint64_t(vocab_size_));
}

}  // namespace megatron
